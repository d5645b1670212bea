package console_test

import (
	"context"
	"log"
	"net/http"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/console"
)

// requireOperator stands for the application's own auth middleware: it
// signs the user in and puts the user in the request's context.
func requireOperator(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, _, ok := r.BasicAuth() // stands for the application's sign-in
		if !ok {
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
	})
}

type userKey struct{}

// operator reads the user requireOperator put in the context: everyone
// signed in reads, only alice acts (an action is a POST).
func operator(r *http.Request) (who string, ok bool) {
	user, _ := r.Context().Value(userKey{}).(string)
	if r.Method == http.MethodPost {
		return user, user == "alice"
	}
	return user, user != ""
}

// The console mounted under /console of an application's server, behind
// its auth, with the actions enabled: console.Authenticate tells the
// console who the user is, so each action's log line names them, and the
// actions are served beyond the loopback.
func Example() {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092"))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()

	ops, err := console.New(console.Client(cl), console.Prefix("/console"), console.Actions(), console.Authenticate(operator))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/console/", requireOperator(ops))
	_ = http.ListenAndServe("127.0.0.1:8080", mux)
}
