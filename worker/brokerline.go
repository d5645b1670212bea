package worker

import "fmt"

// The highest metadata.version each Apache Kafka release line supports,
// as its brokers report it in ApiVersions (SupportedFeatures): measured
// on 4.2.2 (29), 4.3.1 (30) and 4.4.0 (33). A patch release never adds a
// metadata version, so these name a release line, never a patch release:
// nothing a broker says over the protocol tells 4.2.0 from 4.2.1
// (docs/compatibility.md, "Broker defects the worker guards against").
const (
	metadataVersion42 = 29
	metadataVersion43 = 30
	metadataVersion44 = 33
)

// brokerLine is the Apache Kafka release line of the oldest broker the
// worker reached, read at start (step 2 of check).
type brokerLine struct {
	// maxMetadataVersion is the least, over the brokers, of the highest
	// metadata.version each supports; 0 when a broker did not say
	// (kfake, or ApiVersions before v3).
	maxMetadataVersion int16
}

// known reports whether the brokers said which line they run.
func (l brokerLine) known() bool { return l.maxMetadataVersion > 0 }

// before reports whether the brokers are known to run a release line
// older than the one whose highest metadata.version is mv.
func (l brokerLine) before(mv int16) bool { return l.known() && l.maxMetadataVersion < mv }

// String names the line for logs and errors ("Apache Kafka 4.2").
func (l brokerLine) String() string {
	switch v := l.maxMetadataVersion; {
	case v == 0:
		return "an unknown Kafka release (the brokers report no metadata.version)"
	case v < metadataVersion42:
		return fmt.Sprintf("Apache Kafka before 4.2 (metadata.version up to %d)", v)
	case v < metadataVersion43:
		return fmt.Sprintf("Apache Kafka 4.2 (metadata.version up to %d)", v)
	case v < metadataVersion44:
		return fmt.Sprintf("Apache Kafka 4.3 (metadata.version up to %d)", v)
	default:
		return fmt.Sprintf("Apache Kafka 4.4 or newer (metadata.version up to %d)", v)
	}
}
