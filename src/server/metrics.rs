//! `GET /metrics` in the Prometheus text format, through `prometheus-client` (decision 0049):
//! latency histograms (requests per route, ask → answer, agent handshakes), counters and the
//! gauges read when scraped. Each server has its own metrics (no process-wide registry: tests
//! run many servers in one process).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::server::repo::{ConnectionUsage, PoolUsage};

/// The media type of the exposition (the OpenMetrics text, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A request's route: the router's path template (`/api/v1/tasks/:id`), never the path
/// itself, so the label set stays small; `other` for paths no route matched.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub method: String,
    pub route: String,
}

/// Histogram buckets for latencies: 1 ms to about 33 s, doubling.
fn latency_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Buckets for the time a person takes to answer: 1 s to about 9 h, doubling.
fn answer_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}

pub struct Metrics {
    pub http_requests: AtomicU64,
    pub http_errors: AtomicU64,
    pub websocket_clients: AtomicI64,
    pub summary_cas_retries: AtomicU64,
    /// P4/P6: summary refresh attempts (each reads the authority once; a lost compare-and-set
    /// makes another).
    pub summary_refreshes: AtomicU64,
    /// P6: summary compare-and-set statements sent (a refresh that finds the summary already
    /// right sends none).
    pub summary_writes: AtomicU64,
    /// P5: summary refreshes whose loader failed (the stored summary was kept).
    pub summary_loader_failures: AtomicU64,
    request_seconds: Family<RouteLabels, Histogram, fn() -> Histogram>,
    answer_seconds: Histogram,
    agent_launches: Counter,
    agent_launch_failures: Counter,
    agent_handshake_seconds: Histogram,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            http_requests: AtomicU64::default(),
            http_errors: AtomicU64::default(),
            websocket_clients: AtomicI64::default(),
            summary_cas_retries: AtomicU64::default(),
            summary_refreshes: AtomicU64::default(),
            summary_writes: AtomicU64::default(),
            summary_loader_failures: AtomicU64::default(),
            request_seconds: Family::new_with_constructor(latency_buckets),
            answer_seconds: answer_buckets(),
            agent_launches: Counter::default(),
            agent_launch_failures: Counter::default(),
            agent_handshake_seconds: latency_buckets(),
        }
    }
}

/// What the scrape reads besides the counters (the repository and the runtime, by the caller).
#[derive(Default)]
pub struct Gauges {
    /// L2: active clarification bundles (`None`: could not be read).
    pub active_bundles: Option<i64>,
    /// Agent processes running on this server.
    pub running_agents: i64,
    /// Permission requests waiting for the user on this server (N6).
    pub open_permissions: i64,
    /// Prompts waiting behind a running turn on this server (P3).
    pub queued_prompts: i64,
    /// SQLite's one write connection (`None` on PostgreSQL).
    pub writer: Option<ConnectionUsage>,
    /// The database pool (PostgreSQL, in-memory SQLite; `None` for a SQLite file).
    pub pool: Option<PoolUsage>,
}

impl Metrics {
    /// A request served by `route`, answered with `status` after `elapsed`.
    pub fn record_request(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        self.http_requests.fetch_add(1, Ordering::Relaxed);
        if status >= 500 {
            self.http_errors.fetch_add(1, Ordering::Relaxed);
        }
        self.request_seconds
            .get_or_create(&RouteLabels {
                method: method.to_string(),
                route: route.to_string(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// A question answered (or skipped) `waited` after it was asked.
    pub fn record_answer(&self, waited: Duration) {
        self.answer_seconds.observe(waited.as_secs_f64());
    }

    /// An agent launch (process start and ACP handshake) that took `took`.
    pub fn record_launch(&self, took: Duration, ok: bool) {
        self.agent_launches.inc();
        if ok {
            self.agent_handshake_seconds.observe(took.as_secs_f64());
        } else {
            self.agent_launch_failures.inc();
        }
    }

    /// The exposition: this server's metrics, then `extra` (families the caller registers).
    pub fn render(&self, gauges: Gauges, extra: impl FnOnce(&mut Registry)) -> String {
        let mut r = Registry::default();
        let count = |a: &AtomicU64| ConstCounter::new(a.load(Ordering::Relaxed));
        r.register(
            "turnstile_http_requests",
            "HTTP requests served",
            count(&self.http_requests),
        );
        r.register(
            "turnstile_http_server_errors",
            "HTTP responses with status 5xx",
            count(&self.http_errors),
        );
        r.register(
            "turnstile_http_request_duration_seconds",
            "Time from a request to its response's start, per route",
            self.request_seconds.clone(),
        );
        r.register(
            "turnstile_websocket_clients",
            "Connected WebSocket clients",
            ConstGauge::new(self.websocket_clients.load(Ordering::Relaxed)),
        );
        r.register(
            "turnstile_question_answer_seconds",
            "Time from an agent's question to the user's answer or skip",
            self.answer_seconds.clone(),
        );
        r.register(
            "turnstile_agents_running",
            "Agent processes running on this server",
            ConstGauge::new(gauges.running_agents),
        );
        r.register(
            "turnstile_agent_launches",
            "Agent launches (process start and ACP handshake)",
            self.agent_launches.clone(),
        );
        r.register(
            "turnstile_agent_launch_failures",
            "Agent launches that failed (the process, the handshake or a needed login)",
            self.agent_launch_failures.clone(),
        );
        r.register(
            "turnstile_agent_handshake_seconds",
            "Time from an agent's start to its session, for launches that succeeded",
            self.agent_handshake_seconds.clone(),
        );
        r.register(
            "turnstile_open_permissions",
            "Permission requests waiting for the user on this server (N6)",
            ConstGauge::new(gauges.open_permissions),
        );
        r.register(
            "turnstile_queued_prompts",
            "Prompts waiting behind a running turn on this server (P3)",
            ConstGauge::new(gauges.queued_prompts),
        );
        r.register(
            "turnstile_summary_cas_retries",
            "Task summary compare-and-set attempts that lost and were retried (P6)",
            count(&self.summary_cas_retries),
        );
        r.register(
            "turnstile_summary_refreshes",
            "Task summary refresh attempts, each one read of the pending state (P4, P6)",
            count(&self.summary_refreshes),
        );
        r.register(
            "turnstile_summary_writes",
            "Task summary compare-and-set statements sent; an unchanged summary sends none (P6)",
            count(&self.summary_writes),
        );
        r.register(
            "turnstile_summary_loader_failures",
            "Task summary refreshes whose pending-state read failed; the summary was kept (P5)",
            count(&self.summary_loader_failures),
        );
        if let Some(n) = gauges.active_bundles {
            r.register(
                "turnstile_active_bundles",
                "Active clarification bundles: the open questions (L2)",
                ConstGauge::new(n),
            );
        }
        let seconds = |micros: u64| ConstCounter::new(micros as f64 / 1e6);
        if let Some(w) = gauges.writer {
            r.register(
                "turnstile_sqlite_writer_uses",
                "Times SQLite's one write connection was taken (a statement or a transaction)",
                ConstCounter::new(w.lent),
            );
            r.register(
                "turnstile_sqlite_writer_wait_seconds",
                "Time spent waiting for SQLite's write connection (the database pool's wait)",
                seconds(w.waited_micros),
            );
            r.register(
                "turnstile_sqlite_writer_busy_seconds",
                "Time SQLite's write connection was taken; near the elapsed time, writes queue",
                seconds(w.held_micros),
            );
        }
        if let Some(p) = gauges.pool {
            r.register(
                "turnstile_db_pool_acquires",
                "Connections taken from the database pool (a statement or a transaction)",
                ConstCounter::new(p.usage.lent),
            );
            r.register(
                "turnstile_db_pool_wait_seconds",
                "Time spent waiting for a connection of the database pool",
                seconds(p.usage.waited_micros),
            );
            r.register(
                "turnstile_db_pool_busy_seconds",
                "Time connections of the database pool were taken, summed over connections",
                seconds(p.usage.held_micros),
            );
            r.register(
                "turnstile_db_pool_connections",
                "Connections the database pool holds open, idle or taken",
                ConstGauge::new(i64::from(p.size)),
            );
            r.register(
                "turnstile_db_pool_idle_connections",
                "Connections of the database pool open and idle",
                ConstGauge::new(i64::try_from(p.idle).unwrap_or(i64::MAX)),
            );
        }
        extra(&mut r);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r)
            .expect("writing to a String cannot fail");
        out
    }
}
