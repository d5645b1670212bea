package kafkaerr

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestConnHint covers the errors the secure-broker tests cannot make
// (internal/secure makes the others against a real broker).
func TestConnHint(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("sasl: %w", kerr.SaslAuthenticationFailed), "SASL authentication failed"},
		{kerr.UnsupportedSaslMechanism, "does not enable this SASL mechanism"},
		{x509.UnknownAuthorityError{}, "signed by a CA the client does not trust"},
		{x509.HostnameError{Certificate: &x509.Certificate{}, Host: "10.0.0.1"}, "does not name the address dialled"},
		{fmt.Errorf("read: %w", io.EOF), "closed the connection during the first request"},
		{errors.New("invalid large response size 352518912 > limit 104857600; ... is this a plaintext connection speaking to a tls endpoint?"), "the listener speaks TLS and the client does not"},
		{errors.New("something else"), "check the broker addresses, the TLS and SASL settings"},
	} {
		if got := ConnHint(tc.err); !strings.Contains(got, tc.want) {
			t.Errorf("ConnHint(%v) = %q, want it to say %q", tc.err, got, tc.want)
		}
	}
}
