//! Process counters for `GET /metrics` (Prometheus text format).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::server::repo::ConnectionUsage;

#[derive(Default)]
pub struct Metrics {
    pub http_requests: AtomicU64,
    pub http_request_micros: AtomicU64,
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
}

impl Metrics {
    pub fn record_request(&self, micros: u64, status: u16) {
        self.http_requests.fetch_add(1, Ordering::Relaxed);
        self.http_request_micros
            .fetch_add(micros, Ordering::Relaxed);
        if status >= 500 {
            self.http_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The exposition text; `active_bundles` and the write connection's usage (SQLite) are
    /// read from the repository by the caller.
    pub fn render(&self, active_bundles: Option<i64>, writer: Option<ConnectionUsage>) -> String {
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, value: String| {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            ));
        };
        metric(
            "turnstile_http_requests_total",
            "counter",
            "HTTP requests served.",
            self.http_requests.load(Ordering::Relaxed).to_string(),
        );
        metric(
            "turnstile_http_request_duration_seconds_sum",
            "counter",
            "Total time spent serving HTTP requests.",
            format!(
                "{:.6}",
                self.http_request_micros.load(Ordering::Relaxed) as f64 / 1e6
            ),
        );
        metric(
            "turnstile_http_server_errors_total",
            "counter",
            "HTTP responses with status 5xx.",
            self.http_errors.load(Ordering::Relaxed).to_string(),
        );
        metric(
            "turnstile_websocket_clients",
            "gauge",
            "Connected WebSocket clients.",
            self.websocket_clients.load(Ordering::Relaxed).to_string(),
        );
        metric(
            "turnstile_summary_cas_retries_total",
            "counter",
            "Task summary compare-and-set attempts that lost and were retried (P6).",
            self.summary_cas_retries.load(Ordering::Relaxed).to_string(),
        );
        metric(
            "turnstile_summary_refreshes_total",
            "counter",
            "Task summary refresh attempts, each one read of the pending state (P4, P6).",
            self.summary_refreshes.load(Ordering::Relaxed).to_string(),
        );
        metric(
            "turnstile_summary_writes_total",
            "counter",
            "Task summary compare-and-set statements sent; an unchanged summary sends none (P6).",
            self.summary_writes.load(Ordering::Relaxed).to_string(),
        );
        metric(
            "turnstile_summary_loader_failures_total",
            "counter",
            "Task summary refreshes whose pending-state read failed; the summary was kept (P5).",
            self.summary_loader_failures
                .load(Ordering::Relaxed)
                .to_string(),
        );
        if let Some(n) = active_bundles {
            metric(
                "turnstile_active_bundles",
                "gauge",
                "Active clarification bundles (L2).",
                n.to_string(),
            );
        }
        if let Some(w) = writer {
            let seconds = |micros: u64| format!("{:.6}", micros as f64 / 1e6);
            metric(
                "turnstile_sqlite_writer_uses_total",
                "counter",
                "Times SQLite's one write connection was taken (a statement or a transaction).",
                w.lent.to_string(),
            );
            metric(
                "turnstile_sqlite_writer_wait_seconds_total",
                "counter",
                "Time spent waiting for SQLite's write connection.",
                seconds(w.waited_micros),
            );
            metric(
                "turnstile_sqlite_writer_busy_seconds_total",
                "counter",
                "Time SQLite's write connection was taken; near the elapsed time, writes queue.",
                seconds(w.held_micros),
            );
        }
        out
    }
}
