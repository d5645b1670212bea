// Package deploy holds no code: its tests check the files that run the
// thumbnails example under docker compose, since Docker is not available
// where shareq is developed and tested.
//
// The files, from the repository root:
//
//	docker-compose.yml                  Kafka, kafka-init, Postgres, worker, producer, Prometheus, Grafana
//	examples/thumbnails/Dockerfile      the worker and producer image
//	.dockerignore                       what the image build leaves out
//	deploy/kafka/init.sh                creates the topics, sets the share group's configs
//	deploy/prometheus/prometheus.yml    scrapes every worker replica
//	deploy/grafana/provisioning/        the Prometheus datasource and the dashboard provider
//	deploy/grafana/dashboards/          the shareq dashboard
//
// The tests read those files and hold them to the sources they must agree
// with: the Kafka version, ports and Postgres settings in
// scripts/versions.env; the broker settings in scripts/kafka/server.properties
// (with a commented list of intended differences); the flags, topic and
// group of examples/thumbnails; the metric names of the metrics package;
// and each other (ports, service names, mounted paths). Where the Kafka
// jars of scripts/kafka.sh are present, the image's own set-up step
// (kafka.docker.KafkaDockerWrapper) renders and formats the broker's
// configuration from the compose environment. How to use the stack is in
// README.md in this directory.
package deploy
