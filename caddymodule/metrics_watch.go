package caddymodule

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
)

// watchCollector exports, at each scrape, the gauges an operator's alerts and dashboard watch
// that no request counts: the model hosts by health, the requests in flight on them and waiting
// for one, and the free space of the Badger ledgers' disks (deploy/monitoring has the rules and
// the dashboard that use them).
type watchCollector struct {
	hosts, inFlight, queue, diskFree, diskFreeRatio *prometheus.Desc
}

func newWatchCollector(ns, sub string) watchCollector {
	return watchCollector{
		hosts: prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "model_hosts"),
			"Model hosts of the open model server sets, by state (healthy, down) as the health checker last found them.", []string{"state"}, nil),
		inFlight: prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "model_in_flight"),
			"Generations running on the model hosts now.", nil, nil),
		queue: prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "queue_length"),
			"Requests waiting in the admission queue for a model host now.", nil, nil),
		diskFree: prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "ledger_disk_free_bytes"),
			"Bytes free on the fullest disk of the open Badger ledgers (the ledger refuses new work below its reserve, 5% of the disk by default).", nil, nil),
		diskFreeRatio: prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "ledger_disk_free_ratio"),
			"Share of the fullest disk of the open Badger ledgers that is free (0 to 1).", nil, nil),
	}
}

func (c watchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.hosts
	ch <- c.inFlight
	ch <- c.queue
	ch <- c.diskFree
	ch <- c.diskFreeRatio
}

func (c watchCollector) Collect(ch chan<- prometheus.Metric) {
	var healthy, down, inFlight, queue float64
	for _, s := range textgenapp.OpenServers() {
		for _, h := range s.Hosts() {
			if h.Healthy {
				healthy++
			} else {
				down++
			}
			inFlight += float64(h.InFlight)
		}
		queue += float64(s.QueueLen())
	}
	ch <- prometheus.MustNewConstMetric(c.hosts, prometheus.GaugeValue, healthy, "healthy")
	ch <- prometheus.MustNewConstMetric(c.hosts, prometheus.GaugeValue, down, "down")
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, inFlight)
	ch <- prometheus.MustNewConstMetric(c.queue, prometheus.GaugeValue, queue)

	// The disk of each ledger whose files are on this machine, as its Placement states it (a
	// PostgreSQL ledger has none here: its disk is the database server's to watch).
	found := false
	var minFree, minRatio float64
	for _, s := range textgenapp.OpenLedgers() {
		dir := s.Placement().Dir
		if !strings.HasPrefix(dir, "/") {
			continue
		}
		free, total, err := diskSpace(dir)
		if err != nil || total <= 0 {
			continue
		}
		ratio := float64(free) / float64(total)
		if !found || float64(free) < minFree {
			minFree = float64(free)
		}
		if !found || ratio < minRatio {
			minRatio = ratio
		}
		found = true
	}
	if found {
		ch <- prometheus.MustNewConstMetric(c.diskFree, prometheus.GaugeValue, minFree)
		ch <- prometheus.MustNewConstMetric(c.diskFreeRatio, prometheus.GaugeValue, minRatio)
	}
}
