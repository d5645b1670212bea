// Command tool is the module's command: not listed.
package main

func main() {}
