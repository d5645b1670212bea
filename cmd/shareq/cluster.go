package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/shareq/shareq/internal/kafkaerr"
)

// The environment variables that set the defaults of the cluster flags.
// The SASL password is read from the environment (or a file) only, never
// from a flag, so it does not show in ps or a shell history.
const (
	brokersEnv        = "SHAREQ_BROKERS"
	brokersDefault    = "127.0.0.1:9092"
	tlsEnv            = "SHAREQ_TLS"
	tlsCAEnv          = "SHAREQ_TLS_CA"
	tlsCertEnv        = "SHAREQ_TLS_CERT"
	tlsKeyEnv         = "SHAREQ_TLS_KEY"
	tlsServerNameEnv  = "SHAREQ_TLS_SERVER_NAME"
	saslMechanismEnv  = "SHAREQ_SASL_MECHANISM"
	saslUserEnv       = "SHAREQ_SASL_USER"
	saslPasswordEnv   = "SHAREQ_SASL_PASSWORD"
	saslPasswordFile  = "SHAREQ_SASL_PASSWORD_FILE"
	clusterFlagsUsage = `Connection flags (every command that talks to Kafka):
  -brokers host:port,...     seed brokers ($SHAREQ_BROKERS, else 127.0.0.1:9092)
  -tls                       connect with TLS ($SHAREQ_TLS=true); implied by -tls-*
  -tls-ca FILE               PEM CA bundle to trust ($SHAREQ_TLS_CA; default: the system's)
  -tls-cert FILE -tls-key FILE
                             PEM client certificate and key, for mTLS ($SHAREQ_TLS_CERT, $SHAREQ_TLS_KEY)
  -tls-server-name NAME      name the broker's certificate must carry ($SHAREQ_TLS_SERVER_NAME)
  -sasl-mechanism M          PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 ($SHAREQ_SASL_MECHANISM)
  -sasl-user USER            SASL user ($SHAREQ_SASL_USER)
  password                   $SHAREQ_SASL_PASSWORD, or the first line of the file
                             $SHAREQ_SASL_PASSWORD_FILE (never a flag)
`
)

// clusterFlags are the flags every command that talks to Kafka takes:
// the seed brokers and the TLS and SASL settings.
type clusterFlags struct {
	brokers                *string
	tls                    *bool
	ca, cert, key, srvName *string
	mechanism, user        *string
}

func envBool(name string) bool {
	v, err := strconv.ParseBool(os.Getenv(name))
	return err == nil && v
}

// addClusterFlags defines the cluster flags on fs, with their defaults
// from the environment.
func addClusterFlags(fs *flag.FlagSet) *clusterFlags {
	def := os.Getenv(brokersEnv)
	if def == "" {
		def = brokersDefault
	}
	return &clusterFlags{
		brokers:   fs.String("brokers", def, "comma-separated seed brokers, host:port; $"+brokersEnv+" sets the default"),
		tls:       fs.Bool("tls", envBool(tlsEnv), "connect with TLS (implied by the other -tls flags); $"+tlsEnv+" sets the default"),
		ca:        fs.String("tls-ca", os.Getenv(tlsCAEnv), "PEM file of the CAs to trust (default: the system's); $"+tlsCAEnv),
		cert:      fs.String("tls-cert", os.Getenv(tlsCertEnv), "PEM client certificate, for mTLS (with -tls-key); $"+tlsCertEnv),
		key:       fs.String("tls-key", os.Getenv(tlsKeyEnv), "PEM key of -tls-cert; $"+tlsKeyEnv),
		srvName:   fs.String("tls-server-name", os.Getenv(tlsServerNameEnv), "name the brokers' certificates must carry (default: the host dialled); $"+tlsServerNameEnv),
		mechanism: fs.String("sasl-mechanism", os.Getenv(saslMechanismEnv), "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (password from $"+saslPasswordEnv+" or the file $"+saslPasswordFile+"); $"+saslMechanismEnv),
		user:      fs.String("sasl-user", os.Getenv(saslUserEnv), "SASL user; $"+saslUserEnv),
	}
}

// seeds returns the seed brokers, or an error saying how to give them.
func (c *clusterFlags) seeds() ([]string, error) {
	var seeds []string
	for _, b := range strings.Split(*c.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			seeds = append(seeds, b)
		}
	}
	if len(seeds) == 0 {
		return nil, errors.New("no brokers given: pass -brokers host:port or set " + brokersEnv)
	}
	return seeds, nil
}

// opts returns the client options for the flags: seed brokers, TLS, SASL.
func (c *clusterFlags) opts() ([]kgo.Opt, error) {
	seeds, err := c.seeds()
	if err != nil {
		return nil, err
	}
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...)}
	if *c.tls || *c.ca != "" || *c.cert != "" || *c.key != "" || *c.srvName != "" {
		tc, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if *c.mechanism != "" || *c.user != "" {
		m, err := c.sasl()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

func (c *clusterFlags) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: *c.srvName}
	if *c.ca != "" {
		pem, err := os.ReadFile(*c.ca)
		if err != nil {
			return nil, fmt.Errorf("-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-ca %s: no PEM certificate in it", *c.ca)
		}
		tc.RootCAs = pool
	}
	switch {
	case *c.cert != "" && *c.key != "":
		cert, err := tls.LoadX509KeyPair(*c.cert, *c.key)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	case *c.cert != "" || *c.key != "":
		return nil, errors.New("-tls-cert and -tls-key go together: give both (or $" + tlsCertEnv + " and $" + tlsKeyEnv + ")")
	}
	return tc, nil
}

func (c *clusterFlags) sasl() (sasl.Mechanism, error) {
	if *c.user == "" {
		return nil, errors.New("-sasl-mechanism needs -sasl-user (or $" + saslUserEnv + ")")
	}
	pass := os.Getenv(saslPasswordEnv)
	if f := os.Getenv(saslPasswordFile); pass == "" && f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			// The error names the file, never its content.
			return nil, fmt.Errorf("$%s: %w", saslPasswordFile, err)
		}
		pass, _, _ = strings.Cut(string(b), "\n")
	}
	if pass == "" {
		return nil, errors.New("SASL needs a password: set $" + saslPasswordEnv + " or $" + saslPasswordFile + " (there is no flag for it)")
	}
	switch strings.ToUpper(*c.mechanism) {
	case "PLAIN":
		return plain.Auth{User: *c.user, Pass: pass}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: *c.user, Pass: pass}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512", "":
		if *c.mechanism == "" {
			return nil, errors.New("-sasl-user needs -sasl-mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
		}
		return scram.Auth{User: *c.user, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("-sasl-mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", *c.mechanism)
}

// client returns a client for the flags with extra options, without
// contacting the brokers.
func (c *clusterFlags) client(extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := c.opts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(append(opts, kgo.ClientID("shareq-cli")), extra...)...)
	if err != nil {
		return nil, fmt.Errorf("brokers %s: %w", *c.brokers, err)
	}
	return cl, nil
}

// connect returns a client for the flags, after checking within a short
// timeout that one of the brokers answers.
func connect(ctx context.Context, c *clusterFlags) (*kgo.Client, error) {
	cl, err := c.client(kgo.DialTimeout(connectTimeout), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		cl.Close()
		seeds, _ := c.seeds()
		return nil, fmt.Errorf("cannot reach brokers %s: %w (%s)", strings.Join(seeds, ","), err, kafkaerr.ConnHint(err))
	}
	return cl, nil
}
