package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/acl"
)

// An Option configures [New], which validates them all at once.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	topic    string
	pollWait time.Duration
}

// Topic names the control topic; the default is [DefaultTopic]. Workers
// (worker.ControlTopic), the CLI (-controls-topic) and the console must
// name the same one.
func Topic(name string) Option { return optionFunc(func(c *config) { c.topic = name }) }

// pollWait is how long the watching fetch waits for a record before it
// asks again: the idle cost of a watching worker is one fetch per
// pollWait. A record written answers the waiting fetch at once.
const pollWait = 5 * time.Second

// readWait bounds [Client.Read].
const readWait = 30 * time.Second

// Client reads and writes the control topic. It is safe for concurrent
// use.
type Client struct {
	cl       *kgo.Client
	adm      *kadm.Client
	topic    string
	pollWait time.Duration
}

// New returns a Client that writes with cl and reads through clients of
// its own made from cl's options (cl.Opts()), so cl must consume nothing
// (no ConsumeTopics, no group). New does not close cl.
func New(cl *kgo.Client, opts ...Option) (*Client, error) {
	if cl == nil {
		return nil, errors.New("control: New needs a *kgo.Client (kgo.NewClient with kgo.SeedBrokers)")
	}
	c := config{topic: DefaultTopic, pollWait: pollWait}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.topic == "" {
		return nil, fmt.Errorf("control: Topic is empty; leave it out for %s", DefaultTopic)
	}
	return &Client{cl: cl, adm: kadm.NewClient(cl), topic: c.topic, pollWait: c.pollWait}, nil
}

// Topic returns the control topic's name.
func (c *Client) Topic() string { return c.topic }

// TopicConfigs are the control topic's configs: compacted (each key's
// last value is the state), in segments of an hour so compaction runs.
func TopicConfigs() map[string]*string {
	s := func(v string) *string { return &v }
	return map[string]*string{
		"cleanup.policy": s("compact"),
		"segment.ms":     s("3600000"),
	}
}

// EnsureTopic creates the control topic (one partition, the broker's
// default replication, [TopicConfigs]) unless it exists. It needs Create
// on the topic (or the cluster) only when the topic is missing.
func (c *Client) EnsureTopic(ctx context.Context) error {
	if _, _, err := c.ends(ctx, c.adm); !errors.Is(err, ErrNoTopic) {
		return err
	}
	resp, err := c.adm.CreateTopic(ctx, 1, -1, TopicConfigs(), c.topic)
	if err == nil {
		err = resp.Err
	}
	switch {
	case err == nil, errors.Is(err, kerr.TopicAlreadyExists):
		return nil
	case acl.Denied(err):
		return fmt.Errorf("control: create %s: %s", c.topic, acl.Missing(acl.Right{Op: "Create", Resource: acl.Topic, Name: c.topic}, "", err))
	}
	return fmt.Errorf("control: create %s: %w", c.topic, err)
}

// Pause writes p: every worker of p.Group stops fetching and starting
// jobs of p.Topic (every topic, when it is empty) within a fetch round
// trip. A second pause of the same group and topic replaces the first.
// It needs Write on the control topic.
func (c *Client) Pause(ctx context.Context, p Pause) error {
	if err := p.validate(); err != nil {
		return err
	}
	if p.At.IsZero() {
		p.At = time.Now()
	}
	v, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	return c.write(ctx, &kgo.Record{Topic: c.topic, Key: key(kindPause, p.Group, p.Topic), Value: v})
}

// Resume ends the pause of topic of group (the whole group's, when topic
// is empty). Resuming what is not paused is no error. A topic paused both
// on its own and with its whole group runs again only when both are
// resumed.
func (c *Client) Resume(ctx context.Context, group, topic string) error {
	if group == "" {
		return errors.New("control: Resume needs the group")
	}
	return c.write(ctx, &kgo.Record{Topic: c.topic, Key: key(kindPause, group, topic)})
}

// write produces r and waits for the brokers' acknowledgement.
func (c *Client) write(ctx context.Context, r *kgo.Record) error {
	err := c.cl.ProduceSync(ctx, r).FirstErr()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return c.noTopic()
	case acl.Denied(err):
		return fmt.Errorf("control: write %s: %s", c.topic, acl.Missing(acl.Right{Op: "Write", Resource: acl.Topic, Name: c.topic}, "", err))
	}
	return fmt.Errorf("control: write %s: %w", c.topic, err)
}

// noTopic is ErrNoTopic for c's topic, with the command that creates it.
func (c *Client) noTopic() error {
	flag := ""
	if c.topic != DefaultTopic {
		flag = " -controls-topic " + c.topic
	}
	return fmt.Errorf("%w: %s (create it with: shareq topics create -controls%s)", ErrNoTopic, c.topic, flag)
}

// readErr is the error of reading the control topic for err.
func (c *Client) readErr(op string, err error) error {
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return c.noTopic()
	case acl.Denied(err):
		return fmt.Errorf("control: read %s: %s", c.topic, acl.Missing(acl.Right{Op: op, Resource: acl.Topic, Name: c.topic}, "", err))
	}
	return fmt.Errorf("control: read %s: %w", c.topic, err)
}

// ends returns each partition's start and end offset, asked through adm.
func (c *Client) ends(ctx context.Context, adm *kadm.Client) (start, end map[int32]int64, err error) {
	ends, err := adm.ListEndOffsets(ctx, c.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, c.readErr("Describe", err)
	}
	if _, ok := ends[c.topic]; !ok {
		return nil, nil, c.noTopic()
	}
	starts, err := adm.ListStartOffsets(ctx, c.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, c.readErr("Describe", err)
	}
	start, end = map[int32]int64{}, map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		end[o.Partition] = o.Offset
		start[o.Partition] = o.Offset
		if s, ok := starts.Lookup(c.topic, o.Partition); ok {
			start[o.Partition] = s.Offset
		}
	})
	return start, end, nil
}

// Read returns the state: the control topic read to its end. It needs
// Describe and Read on the topic.
func (c *Client) Read(ctx context.Context) (State, error) {
	ctx, cancel := context.WithTimeout(ctx, readWait)
	defer cancel()
	r, err := c.open(ctx)
	if err != nil {
		return State{}, err
	}
	defer r.close()
	if err := r.catchUp(ctx); err != nil {
		return State{}, err
	}
	return r.e.state(), nil
}

// Watch reads the control topic to its end, calls fn with the state, and
// then calls fn again after each change, until ctx ends (it returns nil
// then) or reading fails (ErrNoTopic, a missing right, a failed fetch).
// fn runs on Watch's goroutine; the states it gets are its own.
func (c *Client) Watch(ctx context.Context, fn func(State)) error {
	r, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer r.close()
	if err := r.catchUp(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	fn(r.e.state())
	for {
		changed, err := r.poll(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if changed {
			fn(r.e.state())
		}
	}
}

// reader is one read of the control topic from its start.
type reader struct {
	c   *Client
	rd  *kgo.Client
	end map[int32]int64 // partitions not read to the end offset seen at the start
	e   *entries
}

// open starts a reader at the start of every partition of the topic. Its
// offsets are asked through the reader's own client: c's client may
// hold metadata of minutes ago (kadm asks through kgo's metadata cache),
// from before the topic was created.
func (c *Client) open(ctx context.Context) (*reader, error) {
	rd, err := kgo.NewClient(append(c.cl.Opts(), kgo.FetchMaxWait(c.pollWait))...)
	if err != nil {
		return nil, fmt.Errorf("control: read %s: %w", c.topic, err)
	}
	start, end, err := c.ends(ctx, kadm.NewClient(rd))
	if err != nil {
		rd.Close()
		return nil, err
	}
	assign := map[int32]kgo.Offset{}
	left := map[int32]int64{}
	for p, s := range start {
		assign[p] = kgo.NewOffset().At(s)
		if end[p] > s {
			left[p] = end[p]
		}
	}
	rd.AddConsumePartitions(map[string]map[int32]kgo.Offset{c.topic: assign})
	return &reader{c: c, rd: rd, end: left, e: newEntries()}, nil
}

func (r *reader) close() { r.rd.Close() }

// catchUp reads until every partition reached the end offset seen when
// the reader opened.
func (r *reader) catchUp(ctx context.Context) error {
	for len(r.end) > 0 {
		if _, err := r.poll(ctx); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("control: read %s: %w", r.c.topic, err)
		}
	}
	return nil
}

// poll applies one fetch's records; it reports whether the state changed.
func (r *reader) poll(ctx context.Context) (changed bool, err error) {
	fs := r.rd.PollFetches(ctx)
	fs.EachError(func(_ string, _ int32, e error) {
		if err == nil && !errors.Is(e, context.Canceled) && !errors.Is(e, context.DeadlineExceeded) {
			err = r.c.readErr("Read", e)
		}
	})
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		for _, rec := range fp.Records {
			if r.e.apply(rec) {
				changed = true
			}
		}
		if n := len(fp.Records); n > 0 {
			if end, ok := r.end[fp.Partition]; ok && fp.Records[n-1].Offset >= end-1 {
				delete(r.end, fp.Partition)
			}
		}
	})
	return changed, err
}
