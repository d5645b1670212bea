package sharegroup

import (
	"fmt"
	"strconv"
	"strings"
)

// The texts below are how the shareq command and the console word a
// status's lag, so that both say the same.

// LagText is the total lag as an operator reads it: "42"; "≥ 300" when
// the lag of some partition is unknown and LagAtLeast is what is known;
// "unknown" when nothing is. Never "0" while a partition's lag is unknown.
func (st *Status) LagText() string {
	switch {
	case st.TotalLag != nil:
		return strconv.FormatInt(*st.TotalLag, 10)
	case st.LagAtLeast > 0:
		return "≥ " + strconv.FormatInt(st.LagAtLeast, 10)
	}
	return "unknown"
}

// NotStartedText says why the partitions without a start offset have no
// lag, what their logs hold and what the group will be delivered of it;
// "" when every partition has a start offset.
func (st *Status) NotStartedText() string {
	if st.NoStartOffset == 0 {
		return ""
	}
	// The words for one partition, or for several.
	has, them, their, inLog := "have", "them", "their", "in their logs"
	if st.NoStartOffset == 1 {
		has, them, their, inLog = "has", "it", "its", "in its log"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %s %s no start offset yet (the group has not fetched from %s, or the broker has not written %s state yet), so %s lag is unknown",
		st.NoStartOffset, plural(int64(len(st.Partitions)), "partition"), has, them, their, their)
	inLog = plural(st.InLogNotStarted, "record") + " " + inLog
	reset := "share.auto.offset.reset=" + st.AutoOffsetReset
	switch r := st.AutoOffsetReset; {
	case st.AutoOffsetResetError != "":
		fmt.Fprintf(&b, "; %s (share.auto.offset.reset unknown: %s)", inLog, st.AutoOffsetResetError)
	case r == "earliest":
		fmt.Fprintf(&b, "; %s, all waiting for the group (%s)", inLog, reset)
	case r == "latest":
		fmt.Fprintf(&b, "; %s, not delivered unless the group fetched from %s already (%s: a first fetch starts at the end of the log)", inLog, them, reset)
	case strings.HasPrefix(r, "by_duration:"):
		fmt.Fprintf(&b, "; %s, of which a first fetch delivers those of the last %s (%s)", inLog, strings.TrimPrefix(r, "by_duration:"), reset)
	default:
		fmt.Fprintf(&b, "; %s (%s)", inLog, reset)
	}
	return b.String()
}

// ErrorsText says how many partitions failed, so their lag is unknown;
// "" when none did.
func (st *Status) ErrorsText() string {
	n := 0
	for _, p := range st.Partitions {
		if p.Error != "" {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	if n == 1 {
		return fmt.Sprintf("1 of %s could not be read, so its lag is unknown (the error is on the partition)", plural(int64(len(st.Partitions)), "partition"))
	}
	return fmt.Sprintf("%d of %d partitions could not be read, so their lag is unknown (the error is on each)", n, len(st.Partitions))
}

// plural returns "1 thing" or "n things".
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.FormatInt(n, 10) + " " + thing + "s"
}
