package worker

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

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

// readBrokerLine asks every broker its ApiVersions and returns the line
// of the oldest. A broker that does not answer is left out: step 2
// already found every broker serving the share-group requests.
func readBrokerLine(ctx context.Context, admin *kgo.Client) brokerLine {
	brokers, err := kadm.NewClient(admin).BrokerMetadata(ctx)
	if err != nil {
		return brokerLine{}
	}
	var line brokerLine
	for _, b := range brokers.Brokers {
		req := kmsg.NewPtrApiVersionsRequest()
		req.ClientSoftwareName = "shareq"
		req.ClientSoftwareVersion = "1"
		kresp, err := admin.Broker(int(b.NodeID)).Request(ctx, req)
		if err != nil {
			continue
		}
		resp := kresp.(*kmsg.ApiVersionsResponse)
		var mv int16
		for _, f := range resp.SupportedFeatures {
			if f.Name == "metadata.version" {
				mv = f.MaxVersion
			}
		}
		if mv == 0 {
			return brokerLine{} // one broker that does not say: unknown
		}
		if line.maxMetadataVersion == 0 || mv < line.maxMetadataVersion {
			line.maxMetadataVersion = mv
		}
	}
	return line
}

// checkBrokerLine is step 2b of check: it reads the brokers' release
// line for the topic watch (growthCheck) and, on the 4.2 line, warns that
// 4.2.0 must not be used: its share-group deadlock (KAFKA-20505) cannot be
// refused, because nothing a broker says over the protocol tells 4.2.0
// from 4.2.1 (the fix changed no request version and no feature level).
// It never fails: a broker that does not say leaves the line unknown.
// Group IDs the brokers cannot serve (empty, or with ':', KAFKA-20183 on
// 4.2.0) are refused by New already, on every line.
func (w *Worker) checkBrokerLine(ctx context.Context, admin *kgo.Client) {
	line := readBrokerLine(ctx, admin)
	w.brokerLine = line
	if !line.before(metadataVersion42) && line.before(metadataVersion43) {
		w.cfg.logger.Warn("the brokers run Apache Kafka 4.2: 4.2.0 has a share-group deadlock (KAFKA-20505, fixed in 4.2.1) that can hang the share partitions it strikes, and nothing over the protocol tells 4.2.0 from 4.2.1: make sure every broker runs 4.2.1 or newer",
			"group", w.cfg.group, "brokers", line.String())
	}
}
