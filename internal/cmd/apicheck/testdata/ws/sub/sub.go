// Package sub is the published nested module's: listed.
package sub

// Version is listed.
const Version = "1"
