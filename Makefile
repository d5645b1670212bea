# make test   vet + every test under -race on kfake, then the Kafka suite on a
#             real Apache Kafka broker, with Postgres (both installed and
#             started as needed by scripts/test.sh)
# make unit   the fast part only: vet + tests on kfake, no services
# make bench  the framework-overhead benchmark (no-op handler vs raw franz-go)

.PHONY: test unit bench example kafka-up kafka-down pg-up pg-down

test:
	bash scripts/test.sh

unit:
	go vet ./...
	go test -race -count=1 ./...

bench:
	go test -run '^$$' -bench Noop -benchtime 20000x ./worker

example:
	go run ./examples/thumbnails

kafka-up:
	scripts/kafka.sh up
kafka-down:
	scripts/kafka.sh down
pg-up:
	scripts/postgres.sh up
pg-down:
	scripts/postgres.sh down
