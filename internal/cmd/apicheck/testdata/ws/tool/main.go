// Command tool is a command of the root module: not listed.
package main

// Exported is not listed.
func Exported() {}

func main() {}
