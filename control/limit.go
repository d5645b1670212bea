package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A Rate is N jobs per Per: 14 per second, 600 per minute (10 a second,
// evenly, not 600 at the top of each minute).
type Rate struct {
	N   int           `json:"n"`
	Per time.Duration `json:"per"`
}

func (r Rate) String() string {
	per := r.Per.String()
	switch r.Per {
	case time.Second:
		per = "s"
	case time.Minute:
		per = "m"
	case time.Hour:
		per = "h"
	}
	return strconv.Itoa(r.N) + "/" + per
}

// ParseRate reads a rate as "N/s", "N/m", "N/h" or "N/DURATION" (such as
// "100/10s").
func ParseRate(s string) (Rate, error) {
	n, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Rate{}, fmt.Errorf("rate %q: want N/s, N/m, N/h or N/DURATION, such as 14/s", s)
	}
	r := Rate{}
	var err error
	if r.N, err = strconv.Atoi(n); err != nil {
		return Rate{}, fmt.Errorf("rate %q: %q is not a whole number of jobs", s, n)
	}
	switch per {
	case "s":
		r.Per = time.Second
	case "m":
		r.Per = time.Minute
	case "h":
		r.Per = time.Hour
	default:
		if r.Per, err = time.ParseDuration(per); err != nil {
			return Rate{}, fmt.Errorf("rate %q: %q is not s, m, h or a duration such as 10s", s, per)
		}
	}
	return r, r.validate("rate")
}

func (r Rate) validate(what string) error {
	switch {
	case r.N < 1:
		return fmt.Errorf("%s %d/%v: at least 1 job per interval", what, r.N, r.Per)
	case r.Per <= 0:
		return fmt.Errorf("%s %d/%v: the interval must be positive", what, r.N, r.Per)
	}
	return nil
}

// RateSwitch is how long after it is written a new Rate takes effect on
// every worker at once ([Limit.From]): long enough for every worker
// following the control topic to have it, so that none runs the new rate
// while another still runs the old one.
const RateSwitch = 500 * time.Millisecond

// A Limit changes, at run time, the limits a group's workers declare in
// code for one topic: its TopicRate (fleet-wide) and its KeyLimit's
// concurrency and rate per key (per worker). A field left nil keeps the
// code's value; a worker without the limit in code (no TopicRate, no
// KeyLimit for the topic) ignores that part, saying so once in its log.
type Limit struct {
	// Group and Topic name the limited topic of a share group.
	Group string `json:"group"`
	Topic string `json:"topic"`
	// Rate replaces the topic's TopicRate.
	Rate *Rate `json:"rate,omitempty"`
	// KeyConcurrency replaces the KeyLimit's Keys.Concurrency; 0 lifts
	// it.
	KeyConcurrency *int `json:"key_concurrency,omitempty"`
	// KeyRate replaces the KeyLimit's Keys.Rate and Per.
	KeyRate *Rate `json:"key_rate,omitempty"`
	// Reason and By say why and who, as for a pause.
	Reason string `json:"reason"`
	By     string `json:"by"`
	// At is when the limit was written; [Client.SetLimit] sets it when
	// zero.
	At time.Time `json:"at"`
	// From is when a Rate takes effect, on every worker at once:
	// [RateSwitch] after At, set by [Client.SetLimit]. Concurrency and
	// key rates take effect as each worker reads them.
	From time.Time `json:"from"`
}

// String is l as one line: what it sets, who set it, and why.
func (l Limit) String() string {
	var set []string
	if l.Rate != nil {
		set = append(set, "rate "+l.Rate.String())
	}
	if l.KeyConcurrency != nil {
		set = append(set, "key concurrency "+strconv.Itoa(*l.KeyConcurrency))
	}
	if l.KeyRate != nil {
		set = append(set, "key rate "+l.KeyRate.String())
	}
	return fmt.Sprintf("group %s topic %s: %s, set by %s at %s: %s", l.Group, l.Topic, strings.Join(set, ", "), l.By, l.At.UTC().Format(time.RFC3339), l.Reason)
}

func (l Limit) validate() error {
	var errs []error
	if l.Group == "" || l.Topic == "" {
		errs = append(errs, errors.New("a limit needs its Group and Topic"))
	}
	if l.Rate == nil && l.KeyConcurrency == nil && l.KeyRate == nil {
		errs = append(errs, errors.New("a limit needs Rate, KeyConcurrency or KeyRate (to go back to the code's limits, use ClearLimit)"))
	}
	if l.Rate != nil {
		errs = append(errs, l.Rate.validate("Rate"))
	}
	if l.KeyRate != nil {
		errs = append(errs, l.KeyRate.validate("KeyRate"))
	}
	if l.KeyConcurrency != nil && *l.KeyConcurrency < 0 {
		errs = append(errs, fmt.Errorf("KeyConcurrency %d: want 0 (no limit) or more", *l.KeyConcurrency))
	}
	if strings.TrimSpace(l.Reason) == "" || strings.TrimSpace(l.By) == "" {
		errs = append(errs, errors.New("a limit needs Reason and By (why, and who sets it)"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("control: %w", err)
	}
	return nil
}

func (l Limit) equal(o Limit) bool {
	a, _ := json.Marshal(l)
	b, _ := json.Marshal(o)
	return string(a) == string(b)
}

// Limit returns the limit set for topic of group, if any.
func (s State) Limit(group, topic string) (Limit, bool) {
	for _, l := range s.Limits {
		if l.Group == group && l.Topic == topic {
			return l, true
		}
	}
	return Limit{}, false
}

// LimitsOf returns the limits of group, in State order.
func (s State) LimitsOf(group string) []Limit {
	var out []Limit
	for _, l := range s.Limits {
		if l.Group == group {
			out = append(out, l)
		}
	}
	return out
}

// SetLimit writes l: every worker of l.Group applies it to l.Topic, a
// Rate from l.From ([RateSwitch] after it is written), the key limits as
// it reads them. It replaces the topic's earlier limit as a whole (a
// field left nil goes back to the code's value). It needs Write on the
// control topic.
func (c *Client) SetLimit(ctx context.Context, l Limit) error {
	if err := l.validate(); err != nil {
		return err
	}
	if l.At.IsZero() {
		l.At = time.Now()
	}
	l.From = l.At.Add(RateSwitch)
	v, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	return c.write(ctx, &kgo.Record{Topic: c.topic, Key: key(kindLimit, l.Group, l.Topic), Value: v})
}

// ClearLimit removes the limit set for topic of group: its workers go
// back to the limits their code declares. Clearing what is not set is no
// error.
func (c *Client) ClearLimit(ctx context.Context, group, topic string) error {
	if group == "" || topic == "" {
		return errors.New("control: ClearLimit needs the group and the topic")
	}
	return c.write(ctx, &kgo.Record{Topic: c.topic, Key: key(kindLimit, group, topic)})
}
