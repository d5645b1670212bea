// Package kafkaerr explains connection failures of Kafka clients: what a
// TLS, SASL or network error most likely means and what to change, for the
// worker's start-up checks and the shareq CLI.
package kafkaerr

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kerr"
)

// ConnHint says what a failure to reach the brokers most likely means:
// TLS, SASL or plain reachability. It never repeats a credential.
func ConnHint(err error) string {
	var (
		unknownCA  x509.UnknownAuthorityError
		hostname   x509.HostnameError
		invalid    x509.CertificateInvalidError
		recordHdr  tls.RecordHeaderError
		alert      tls.AlertError
		netOpError *net.OpError
	)
	msg := err.Error()
	switch {
	// franz-go recognises these two from the bytes it got; say what to do.
	case strings.Contains(msg, "plaintext connection speaking to a tls endpoint"):
		return "the listener speaks TLS and the client does not: pass a tls.Config (kgo.DialTLSConfig; shareq CLI: -tls, -tls-ca) or use the PLAINTEXT port"
	case strings.Contains(msg, "using TLS when the broker is not expecting it"):
		return "the listener does not speak TLS: drop the TLS config or use the TLS port"
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return "SASL authentication failed: check the user name, the password and the mechanism (kgo.SASL; shareq CLI: -sasl-user, $SHAREQ_SASL_PASSWORD)"
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return "the broker does not enable this SASL mechanism on that listener: use one it lists in sasl.enabled.mechanisms"
	case errors.Is(err, kerr.IllegalSaslState):
		return "the listener does not expect SASL here: check the port and the security protocol (SASL_SSL needs TLS too: kgo.DialTLSConfig; shareq CLI: -tls)"
	case errors.As(err, &unknownCA):
		return "TLS: the broker's certificate is signed by a CA the client does not trust: put that CA in the tls.Config's RootCAs (kgo.DialTLSConfig; shareq CLI: -tls-ca)"
	case errors.As(err, &hostname):
		return "TLS: the broker's certificate does not name the address dialled: connect by a name it lists, or set tls.Config.ServerName (shareq CLI: -tls-server-name)"
	case errors.As(err, &invalid):
		return "TLS: the broker's certificate is not valid (expired, or not for server use)"
	case errors.As(err, &recordHdr):
		return "TLS: the broker did not answer in TLS: that listener is probably PLAINTEXT or SASL_PLAINTEXT; drop TLS or use the TLS port"
	case errors.As(err, &alert), strings.Contains(msg, "tls: "):
		return "TLS: the handshake failed: if the listener requires a client certificate (mTLS), give one the broker's truststore accepts in tls.Config.Certificates (shareq CLI: -tls-cert, -tls-key)"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		return "the broker closed the connection during the first request: that listener probably wants TLS (kgo.DialTLSConfig; shareq CLI: -tls) or SASL (kgo.SASL; -sasl-mechanism), or the client needs a certificate"
	case errors.As(err, &netOpError):
		return "check the broker addresses and that the brokers listen there"
	}
	return "check the broker addresses, the TLS and SASL settings, and that the brokers listen there"
}
