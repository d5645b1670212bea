package worker

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

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
