package console_test

import (
	"log"
	"net/http"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/console"
)

// requireOperator stands for the application's own auth middleware.
func requireOperator(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := r.BasicAuth(); !ok {
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// The console mounted under /console of an application's server, behind
// its auth, with the actions enabled.
func Example() {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092"))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()

	ops, err := console.New(console.Client(cl), console.Prefix("/console"), console.Actions())
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/console/", requireOperator(ops))
	_ = http.ListenAndServe("127.0.0.1:8080", mux)
}
