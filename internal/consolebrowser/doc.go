// Package consolebrowser holds the console's end-to-end test in a real
// browser: headless Chromium, driven with chromedp, against a worker that
// parks jobs and a console that replays them, and a console with basic
// auth whose enqueue form logs the user. It is a module of its own
// so that the console's users do not get chromedp in their module graph.
//
// The test runs when SHAREQ_TEST_BROWSER is set (make test sets it, and
// scripts/test.sh installs Debian's chromium package when it is missing):
// to "1" for the chromium on the PATH, or to the browser's path. With
// SHAREQ_CONSOLE_SCREENSHOTS set to a directory it also saves the
// screenshots of the main pages there (docs/console/ holds the ones the
// docs show):
//
//	SHAREQ_TEST_BROWSER=1 SHAREQ_CONSOLE_SCREENSHOTS=$PWD/docs/console go test ./internal/consolebrowser
package consolebrowser
