package worker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/internal/acl"
)

// seeds returns the seed brokers the admin client was given.
func (w *Worker) seeds(admin *kgo.Client) []string {
	if s, ok := admin.OptValue(kgo.SeedBrokers).([]string); ok && len(s) > 0 {
		return s
	}
	return w.cfg.brokers
}

// notAuthorized is the start-up error for a missing right.
func (w *Worker) notAuthorized(admin *kgo.Client, r acl.Right, cause error) error {
	var bootstrap string
	if s := w.seeds(admin); len(s) > 0 {
		bootstrap = s[0]
	}
	return fmt.Errorf("%w: %s", ErrNotAuthorized, acl.Missing(r, bootstrap, cause))
}

// ConnHint says what a failure to reach the brokers most likely means:
// TLS, SASL or plain reachability. It never repeats a credential.
func connHint(err error) string {
	var (
		unknownCA  x509.UnknownAuthorityError
		hostname   x509.HostnameError
		invalid    x509.CertificateInvalidError
		recordHdr  tls.RecordHeaderError
		alert      tls.AlertError
		netOpError *net.OpError
	)
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return "SASL authentication failed: check the user name, the password and the mechanism in the kgo.SASL option"
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return "the broker does not enable this SASL mechanism on that listener: use one it lists in sasl.enabled.mechanisms"
	case errors.Is(err, kerr.IllegalSaslState):
		return "the listener does not expect SASL here: check the port and the security protocol (SASL_SSL needs kgo.DialTLSConfig too)"
	case errors.As(err, &unknownCA):
		return "TLS: the broker's certificate is signed by a CA the client does not trust: put that CA in the tls.Config's RootCAs passed with kgo.DialTLSConfig"
	case errors.As(err, &hostname):
		return "TLS: the broker's certificate does not name the address dialled: connect by a name it lists, or set tls.Config.ServerName"
	case errors.As(err, &invalid):
		return "TLS: the broker's certificate is not valid (expired, or not for server use)"
	case errors.As(err, &recordHdr):
		return "TLS: the broker did not answer in TLS: that listener is probably PLAINTEXT or SASL_PLAINTEXT; drop kgo.DialTLSConfig or use the TLS port"
	case errors.As(err, &alert), strings.Contains(err.Error(), "tls: "):
		return "TLS: the handshake failed: if the listener requires a client certificate (mTLS), give one the broker's truststore accepts in tls.Config.Certificates"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		return "the broker closed the connection during the first request: that listener probably wants TLS (pass kgo.DialTLSConfig) or SASL (kgo.SASL), or the client needs a certificate"
	case errors.As(err, &netOpError):
		return "check Brokers/ClientOpts and that the brokers listen there"
	}
	return "check Brokers/ClientOpts, TLS and SASL settings, and that the brokers listen there"
}

// topicInfo is what a metadata request says of one topic.
type topicInfo struct {
	id  kadm.TopicID
	err error
	ops int32 // authorized operations bit field; math.MinInt32 when the broker did not say
}

func (d topicInfo) allows(op kmsg.ACLOperation) bool {
	if d.ops == math.MinInt32 {
		return true
	}
	return d.ops&(1<<int(op)) != 0
}

// describeTopics asks for the metadata of the handled and required topics,
// with the operations the client is authorized for on each.
func (w *Worker) describeTopics(ctx context.Context, admin *kgo.Client) (map[string]topicInfo, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.IncludeTopicAuthorizedOperations = true
	for _, t := range append(append([]string{}, w.topics...), w.cfg.required...) {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, admin)
	if err != nil {
		return nil, fmt.Errorf("worker: list topics: %w", err)
	}
	out := make(map[string]topicInfo, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		out[*t.Topic] = topicInfo{id: t.TopicID, err: kerr.ErrorForCode(t.ErrorCode), ops: t.AuthorizedOperations}
	}
	return out, nil
}

// checkGroupRead checks that the worker may read its share group: a
// share-group member needs Read on the group for every heartbeat, fetch
// and acknowledgement. Describe of a group is implied by Read, so a
// refused describe means Read is missing. A group that does not exist
// yet tells nothing; the member's first heartbeat then fails in Run with
// the same error.
func (w *Worker) checkGroupRead(ctx context.Context, admin *kgo.Client) error {
	req := kmsg.NewPtrShareGroupDescribeRequest()
	req.GroupIDs = []string{w.cfg.group}
	req.IncludeAuthorizedOperations = true
	resp, err := req.RequestWith(ctx, admin)
	if err != nil {
		if acl.Denied(err) {
			return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Group, Name: w.cfg.group}, err)
		}
		return nil // the member's heartbeat will say more
	}
	for _, g := range resp.Groups {
		gerr := kerr.ErrorForCode(g.ErrorCode)
		switch {
		case acl.Denied(gerr):
			return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Group, Name: w.cfg.group}, gerr)
		case gerr == nil && g.AuthorizedOperations != math.MinInt32 && g.AuthorizedOperations&(1<<int(kmsg.ACLOperationRead)) == 0:
			return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Group, Name: w.cfg.group}, errors.New("the broker authorizes Describe only"))
		}
	}
	return nil
}

// memberErr turns the share-group member's failure before it joined into
// the start-up error it stands for.
func (w *Worker) memberErr(admin *kgo.Client, err error) error {
	switch {
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Group, Name: w.cfg.group}, err)
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Topic, Name: strings.Join(w.topics, ",")}, err)
	}
	return fmt.Errorf("worker: share-group member: %w", err)
}
