package lib

// TestHelper is exported, but only in the package's tests: not listed.
func TestHelper() {}
