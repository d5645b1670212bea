package deploy

import (
	"encoding/json"
	"errors"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"go.yaml.in/yaml/v3"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/metrics"
	"github.com/shareq/shareq/worker"
)

// metricsPort returns the port of the worker's -metrics-addr.
func metricsPort(t *testing.T) string {
	t.Helper()
	addr := commandFlags(t, "worker", compose(t).svc(t, "worker").Command)["metrics-addr"]
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		t.Fatalf("worker: -metrics-addr=%q: want a host:port or :port (%v)", addr, err)
	}
	return port
}

type promConfig struct {
	Global struct {
		ScrapeInterval string `yaml:"scrape_interval"`
	} `yaml:"global"`
	ScrapeConfigs []struct {
		JobName     string `yaml:"job_name"`
		MetricsPath string `yaml:"metrics_path"`
		DNSSD       []struct {
			Names []string `yaml:"names"`
			Type  string   `yaml:"type"`
			Port  int      `yaml:"port"`
		} `yaml:"dns_sd_configs"`
	} `yaml:"scrape_configs"`
}

// TestPrometheus checks that Prometheus finds every worker replica by DNS
// on the port of the worker's -metrics-addr, and that the worker's health
// check asks the same port.
func TestPrometheus(t *testing.T) {
	c := compose(t)
	prom := c.svc(t, "prometheus")
	const containerPath = "/etc/prometheus/prometheus.yml"
	rel := hostPathOf(prom, containerPath)
	if rel == "" {
		t.Fatalf("prometheus: nothing mounted at %s", containerPath)
	}
	if !slices.Contains(prom.Command, "--config.file="+containerPath) {
		t.Errorf("prometheus: command %q does not load %s", prom.Command, containerPath)
	}
	var cfg promConfig
	if err := yaml.Unmarshal(readFile(t, rel), &cfg); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	port := metricsPort(t)
	found := false
	for _, sc := range cfg.ScrapeConfigs {
		for _, sd := range sc.DNSSD {
			if !slices.Contains(sd.Names, "worker") && !slices.Contains(sd.Names, "tasks.worker") {
				continue
			}
			found = true
			if sd.Type != "A" {
				t.Errorf("%s: job %s: dns_sd_configs type %q, want A (one record per replica)", rel, sc.JobName, sd.Type)
			}
			if strconv.Itoa(sd.Port) != port {
				t.Errorf("%s: job %s scrapes port %d, the worker serves metrics on -metrics-addr port %s", rel, sc.JobName, sd.Port, port)
			}
			if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
				t.Errorf("%s: job %s: metrics_path %q, the worker serves /metrics", rel, sc.JobName, sc.MetricsPath)
			}
			for _, e := range dashboardExprs(t) {
				if strings.Contains(e, "up{") && !strings.Contains(e, `up{job="`+sc.JobName+`"`) {
					t.Errorf("%s: %q counts up{} of another job than %s's", dashboardFile, e, rel)
				}
			}
		}
	}
	if !found {
		t.Errorf("%s: no dns_sd_configs job for the worker service (names: [worker], type: A)", rel)
	}
	w := c.svc(t, "worker")
	if w.Healthcheck == nil || !strings.Contains(strings.Join(w.Healthcheck.Test, " "), "localhost:"+port+"/metrics") {
		t.Errorf("worker: the health check should fetch http://localhost:%s/metrics", port)
	}
}

type grafanaDatasources struct {
	Datasources []struct {
		Name     string         `yaml:"name"`
		UID      string         `yaml:"uid"`
		Type     string         `yaml:"type"`
		URL      string         `yaml:"url"`
		JSONData map[string]any `yaml:"jsonData"`
	} `yaml:"datasources"`
}

type grafanaProviders struct {
	Providers []struct {
		Name    string `yaml:"name"`
		Type    string `yaml:"type"`
		Options struct {
			Path string `yaml:"path"`
		} `yaml:"options"`
	} `yaml:"providers"`
}

const (
	grafanaProvisioning = "/etc/grafana/provisioning"
	dashboardFile       = "deploy/grafana/dashboards/shareq.json"
)

// TestGrafanaProvisioning checks that the datasource points at the
// Prometheus service, that the dashboard provider reads the directory
// compose mounts the dashboards at, and that the home dashboard exists.
func TestGrafanaProvisioning(t *testing.T) {
	c := compose(t)
	g := c.svc(t, "grafana")
	prov := hostPathOf(g, grafanaProvisioning)
	if prov == "" {
		t.Fatalf("grafana: nothing mounted at %s", grafanaProvisioning)
	}

	var ds grafanaDatasources
	rel := prov + "/datasources/prometheus.yml"
	if err := yaml.Unmarshal(readFile(t, rel), &ds); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" {
		t.Fatalf("%s: want one prometheus datasource, got %+v", rel, ds.Datasources)
	}
	d := ds.Datasources[0]
	prom := c.svc(t, "prometheus")
	var promPort string
	for _, p := range prom.Ports {
		promPort = p[strings.LastIndex(p, ":")+1:]
	}
	if want := "http://prometheus:" + promPort; d.URL != want {
		t.Errorf("%s: url %q, want %q (the prometheus service)", rel, d.URL, want)
	}
	if d.UID != dashboardDatasourceUID {
		t.Errorf("%s: uid %q; the dashboard refers to %q", rel, d.UID, dashboardDatasourceUID)
	}
	var pc promConfig
	if err := yaml.Unmarshal(readFile(t, hostPathOf(prom, "/etc/prometheus/prometheus.yml")), &pc); err != nil {
		t.Fatal(err)
	}
	if d.JSONData["timeInterval"] != pc.Global.ScrapeInterval {
		t.Errorf("%s: jsonData.timeInterval %v, want the scrape interval %s", rel, d.JSONData["timeInterval"], pc.Global.ScrapeInterval)
	}

	var pv grafanaProviders
	rel = prov + "/dashboards/shareq.yml"
	if err := yaml.Unmarshal(readFile(t, rel), &pv); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	if len(pv.Providers) != 1 {
		t.Fatalf("%s: want one provider, got %+v", rel, pv.Providers)
	}
	dir := pv.Providers[0].Options.Path
	if got := hostPathOf(g, dir); got != "deploy/grafana/dashboards" {
		t.Errorf("grafana: the provider reads %s, where compose mounts %q, want deploy/grafana/dashboards", dir, got)
	}
	home := g.env(t, "grafana")["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
	if hostPathOf(g, home) != dashboardFile {
		t.Errorf("grafana: GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH %q is not %s as mounted", home, dashboardFile)
	}
}

const dashboardDatasourceUID = "prometheus"

type dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int         `json:"id"`
	Title      string      `json:"title"`
	Type       string      `json:"type"`
	Datasource *datasource `json:"datasource"`
	GridPos    struct{ X, Y, W, H int }
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func dashboardText(t *testing.T) string {
	t.Helper()
	return string(readFile(t, dashboardFile))
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal([]byte(dashboardText(t)), &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// dashboardExprs returns the PromQL of every panel's targets.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	var exprs []string
	for _, p := range loadDashboard(t).Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	return exprs
}

// TestDashboardPanels checks the dashboard's structure: unique panel ids,
// the provisioned datasource everywhere, panels inside the 24-column grid
// and not overlapping, and the panels the stack is for.
func TestDashboardPanels(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: no uid or no panels", dashboardFile)
	}
	ids := map[int]string{}
	cells := map[[2]int]string{}
	for _, p := range d.Panels {
		if other, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("panel %q: id %d is zero or also %q's", p.Title, p.ID, other)
		}
		ids[p.ID] = p.Title
		if p.Datasource == nil || p.Datasource.UID != dashboardDatasourceUID {
			t.Errorf("panel %q: datasource %+v, want uid %q", p.Title, p.Datasource, dashboardDatasourceUID)
		}
		for _, tg := range p.Targets {
			if tg.Datasource != nil && tg.Datasource.UID != dashboardDatasourceUID {
				t.Errorf("panel %q target %s: datasource uid %q", p.Title, tg.RefID, tg.Datasource.UID)
			}
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q target %s: empty expr", p.Title, tg.RefID)
			}
		}
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
					return
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
	}

	// What the dashboard is for: an expression matching each of these.
	exprs := dashboardExprs(t)
	for what, re := range map[string]string{
		"job outcomes":            `sum by \(outcome\) \(rate\(shareq_jobs_total\b`,
		"jobs succeeded":          `shareq_jobs_total\{[^}]*outcome=\\?"succeeded`,
		"handler latency p50":     `histogram_quantile\(0\.50?, .*shareq_job_duration_seconds_bucket`,
		"handler latency p95":     `histogram_quantile\(0\.95, .*shareq_job_duration_seconds_bucket`,
		"handler latency p99":     `histogram_quantile\(0\.99, .*shareq_job_duration_seconds_bucket`,
		"share-group lag":         `shareq_share_group_lag_total\b`,
		"jobs in flight":          `shareq_jobs_in_flight\b`,
		"jobs parked by reason":   `by \(reason\) .*shareq_jobs_parked_total\b`,
		"lock renewals by result": `by \(result\) .*shareq_lock_renewals_total\b`,
		"ack errors":              `shareq_ack_errors_total\b`,
		"open key breakers":       `shareq_key_breakers_open\b`,
		"jobs waiting for keys":   `shareq_jobs_waiting_for_keys\b`,
		"snoozed jobs held":       `shareq_jobs_snoozed_held\b`,
		"key breakers opened":     `by \(topic\) .*shareq_key_breakers_opened_total\b`,
	} {
		r := regexp.MustCompile(re)
		if !slices.ContainsFunc(exprs, r.MatchString) {
			t.Errorf("%s: no panel shows %s (an expr matching %s)", dashboardFile, what, re)
		}
	}
}

// TestDashboardMetricNames checks every shareq_* name in the dashboard (in
// queries, variables and descriptions) against the metrics the metrics
// package exports. A histogram's name may carry _bucket, _sum or _count.
func TestDashboardMetricNames(t *testing.T) {
	known := exportedMetrics(t)
	used := regexp.MustCompile(`\bshareq_[a-z0-9_]*[a-z0-9]`).FindAllString(dashboardText(t), -1)
	if len(used) == 0 {
		t.Fatalf("%s uses no shareq_ metric", dashboardFile)
	}
	for _, name := range slices.Compact(slices.Sorted(slices.Values(used))) {
		if _, ok := known[name]; ok {
			continue
		}
		ok := false
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, cut := strings.CutSuffix(name, suffix); cut {
				ty, known := known[base]
				ok = known && (ty == dto.MetricType_HISTOGRAM || (suffix != "_bucket" && ty == dto.MetricType_SUMMARY))
			}
		}
		if !ok {
			t.Errorf("%s uses %s, which the metrics package does not export (it exports %s)", dashboardFile, name, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
	}
}

// exportedMetrics returns the names of every metric the metrics package
// defines, with their types where known: the worker metrics of
// metrics.New, gathered after an event of each kind so that every family
// has a series, and the descriptors of metrics.NewLagCollector (which
// cannot be gathered without a broker: untyped here).
func exportedMetrics(t *testing.T) map[string]dto.MetricType {
	t.Helper()
	reg := prometheus.NewRegistry()
	rec := &describing{Registerer: reg}
	m, err := metrics.New(rec, metrics.Topics("t"))
	if err != nil {
		t.Fatal(err)
	}
	job := &handler.Job{Topic: "t", Partition: 0, Offset: 1, DeliveryCount: 2, Group: "g"}
	m.JobStarted(job)
	m.JobFinished(job, worker.Result{Ack: worker.AckAccept, Ran: true, Duration: time.Second, LockLeft: time.Second})
	m.JobFinished(job, worker.Result{Ack: worker.AckRelease, Err: worker.ErrLockExpired})
	m.LockRenewed(job, nil)
	m.LockRenewed(job, errors.New("x"))
	m.AckFailed("t", 0, errors.New("x"))
	m.MemberStats(worker.MemberStats{State: "joined", Partitions: 1, Held: 1, Fetches: 1, Fetched: 1, SessionsOpened: 1,
		Acks: map[worker.Ack]int64{worker.AckAccept: 1, worker.AckRelease: 1, worker.AckReject: 1}})
	m.JobFinished(job, worker.Result{Outcome: worker.OutcomeParked, Ack: worker.AckAccept, Parked: &handler.DeadLetter{Reason: "decode"}})
	m.Duplicate(job, "k")
	m.TopicMissing("t", true)
	m.TopicRecreated("t")
	m.WorkerPaused("postgres", errors.New("x"))
	m.WorkerResumed("postgres", time.Second, true)

	out := map[string]dto.MetricType{}
	// An untyped placeholder for names known only by their descriptor.
	const unknown = dto.MetricType(-1)
	for _, n := range rec.names(t) {
		out[n] = unknown
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		out[mf.GetName()] = mf.GetType()
	}
	lag := metrics.NewLagCollector(kadm.NewClient(nil), "g")
	if err := rec.Register(lag); err != nil {
		t.Fatal(err)
	}
	for _, n := range rec.names(t) {
		if _, ok := out[n]; !ok {
			out[n] = unknown
		}
	}
	for n := range out {
		if !strings.HasPrefix(n, metrics.Namespace+"_") {
			t.Errorf("metric %s lacks the %s_ prefix", n, metrics.Namespace)
		}
	}
	return out
}

// describing is a Registerer that also records the descriptors of what is
// registered through it.
type describing struct {
	prometheus.Registerer
	descs []*prometheus.Desc
}

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		d.descs = append(d.descs, desc)
	}
	return d.Registerer.Register(c)
}

func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

// names returns the metric names of the recorded descriptors. Desc keeps
// its name unexported; its String form is Desc{fqName: "…", …}.
func (d *describing) names(t *testing.T) []string {
	t.Helper()
	re := regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)
	var out []string
	for _, desc := range d.descs {
		m := re.FindStringSubmatch(desc.String())
		if m == nil {
			t.Fatalf("cannot read the metric name from %s", desc)
		}
		out = append(out, m[1])
	}
	return out
}

// TestExportedMetrics guards exportedMetrics itself: it must see the
// names the dashboard is built on, with the histogram typed.
func TestExportedMetrics(t *testing.T) {
	known := exportedMetrics(t)
	for name, want := range map[string]dto.MetricType{
		"shareq_jobs_total":            dto.MetricType_COUNTER,
		"shareq_job_duration_seconds":  dto.MetricType_HISTOGRAM,
		"shareq_jobs_parked_total":     dto.MetricType_COUNTER,
		"shareq_share_group_lag_total": -1,
	} {
		if got, ok := known[name]; !ok || got != want {
			t.Errorf("exportedMetrics()[%s] = %v, %v; want %v", name, got, ok, want)
		}
	}
}
