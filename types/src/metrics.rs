//! Metric families and their Prometheus text exposition (format 0.0.4),
//! shared by the three processes. Each process keeps its families in one
//! static and renders them when scraped; serving them is the binary's.
//!
//! Label sets are bounded by construction: every family names its label
//! keys, and a family holds at most `max_series` label sets; a new set
//! beyond that is counted under [`OVERFLOW`] for every label, so a value
//! that should never have been a label (a ticket id) cannot grow the
//! exposition without bound. Callers pass only values from closed sets
//! (an enum's name, a configured rule set); the overflow is the fuse.
//!
//! [`MetricsListen`] is the `[metrics]` table of each process's config:
//! a loopback address to serve on (metrics are unauthenticated; they hold
//! no secret and no ticket id, but stay on the host).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// The label value that stands for every label set past `max_series`.
pub const OVERFLOW: &str = "_overflow";

/// How many label sets a family holds by default.
pub const DEFAULT_MAX_SERIES: usize = 256;

/// Latency buckets in seconds: 100 µs to 10 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// `[metrics]` in a process's config: where it serves its metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsListen {
    /// A loopback address and port (`127.0.0.1:9464`, `[::1]:9464`).
    pub listen: SocketAddr,
}

impl MetricsListen {
    /// Refuses an address off the host: nothing authenticates a scrape.
    pub fn check(&self) -> Result<(), String> {
        if self.listen.ip().is_loopback() {
            Ok(())
        } else {
            Err(format!(
                "{} is not a loopback address: metrics are served unauthenticated, so only \
                 127.0.0.0/8 or ::1 (scrape through a local agent)",
                self.listen
            ))
        }
    }
}

/// What a family is, for `# TYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// The label sets of one family and their values.
struct Series<V> {
    max: usize,
    map: Mutex<BTreeMap<Vec<String>, V>>,
}

/// A label set as the map holds it (`Vec<String>`) or as a caller passes it
/// (`[&str]`), ordered alike (value by value, as `Vec<String>` orders), so
/// that a set already counted is found without building an owned key: a
/// proxy request counts into three families, and each owned key was one
/// allocation per label.
trait LabelValues {
    fn count(&self) -> usize;
    fn value(&self, i: usize) -> &str;
}

impl LabelValues for Vec<String> {
    fn count(&self) -> usize {
        self.len()
    }
    fn value(&self, i: usize) -> &str {
        &self[i]
    }
}

impl LabelValues for &[&str] {
    fn count(&self) -> usize {
        self.len()
    }
    fn value(&self, i: usize) -> &str {
        self[i]
    }
}

impl<'a> std::borrow::Borrow<dyn LabelValues + 'a> for Vec<String> {
    fn borrow(&self) -> &(dyn LabelValues + 'a) {
        self
    }
}

impl dyn LabelValues + '_ {
    fn values(&self) -> impl Iterator<Item = &str> {
        (0..self.count()).map(|i| self.value(i))
    }
}

impl PartialEq for dyn LabelValues + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.values().eq(other.values())
    }
}

impl Eq for dyn LabelValues + '_ {}

impl PartialOrd for dyn LabelValues + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn LabelValues + '_ {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.values().cmp(other.values())
    }
}

impl<V: Default> Series<V> {
    fn new(max: usize) -> Self {
        Series {
            max,
            map: Mutex::new(BTreeMap::new()),
        }
    }

    fn with<R>(&self, values: &[&str], f: impl FnOnce(&mut V) -> R) -> R {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = map.get_mut(&values as &dyn LabelValues) {
            return f(v);
        }
        let key: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
        let key = if map.len() < self.max {
            key
        } else {
            vec![OVERFLOW.to_owned(); values.len()]
        };
        f(map.entry(key).or_default())
    }

    fn snapshot(&self) -> Vec<(Vec<String>, V)>
    where
        V: Clone,
    {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

/// A family's name, help and label keys.
struct Meta {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
}

impl Meta {
    fn header(&self, out: &mut String, kind: Kind) {
        let _ = writeln!(out, "# HELP {} {}", self.name, escape_help(self.help));
        let _ = writeln!(out, "# TYPE {} {}", self.name, kind.as_str());
    }

    fn check(&self, values: &[&str]) {
        debug_assert_eq!(
            values.len(),
            self.labels.len(),
            "{}: label values do not match its keys",
            self.name
        );
    }
}

/// A count that only goes up.
pub struct Counter {
    meta: Meta,
    series: Series<u64>,
}

impl Counter {
    pub fn new(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Counter {
        Counter::bounded(name, help, labels, DEFAULT_MAX_SERIES)
    }

    pub fn bounded(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
        max_series: usize,
    ) -> Counter {
        Counter {
            meta: Meta { name, help, labels },
            series: Series::new(max_series),
        }
    }

    pub fn inc(&self, values: &[&str]) {
        self.add(values, 1);
    }

    pub fn add(&self, values: &[&str], n: u64) {
        self.meta.check(values);
        self.series.with(values, |v| *v = v.saturating_add(n));
    }

    /// The count of one label set (0 when never counted).
    pub fn get(&self, values: &[&str]) -> u64 {
        let key: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
        let map = self.series.map.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&key).copied().unwrap_or(0)
    }

    pub fn render(&self, out: &mut String) {
        self.meta.header(out, Kind::Counter);
        for (values, v) in self.series.snapshot() {
            sample(
                out,
                self.meta.name,
                "",
                self.meta.labels,
                &values,
                None,
                v as f64,
            );
        }
    }
}

/// A value that goes up and down.
pub struct Gauge {
    meta: Meta,
    series: Series<i64>,
}

impl Gauge {
    pub fn new(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Gauge {
        Gauge {
            meta: Meta { name, help, labels },
            series: Series::new(DEFAULT_MAX_SERIES),
        }
    }

    pub fn add(&self, values: &[&str], n: i64) {
        self.meta.check(values);
        self.series.with(values, |v| *v = v.saturating_add(n));
    }

    pub fn set(&self, values: &[&str], n: i64) {
        self.meta.check(values);
        self.series.with(values, |v| *v = n);
    }

    pub fn render(&self, out: &mut String) {
        self.meta.header(out, Kind::Gauge);
        for (values, v) in self.series.snapshot() {
            sample(
                out,
                self.meta.name,
                "",
                self.meta.labels,
                &values,
                None,
                v as f64,
            );
        }
    }
}

#[derive(Debug, Clone, Default)]
struct HistogramData {
    /// Per bucket, the observations at or below its bound (not cumulative).
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
}

/// Observations (seconds) counted into buckets.
pub struct Histogram {
    meta: Meta,
    bounds: &'static [f64],
    series: Series<HistogramData>,
}

impl Histogram {
    pub fn new(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
        bounds: &'static [f64],
    ) -> Histogram {
        Histogram {
            meta: Meta { name, help, labels },
            bounds,
            series: Series::new(DEFAULT_MAX_SERIES),
        }
    }

    pub fn observe(&self, values: &[&str], value: f64) {
        self.meta.check(values);
        let bucket = self.bounds.iter().position(|b| value <= *b);
        let n = self.bounds.len();
        self.series.with(values, |h| {
            if h.buckets.len() != n {
                h.buckets = vec![0; n];
            }
            if let Some(i) = bucket {
                h.buckets[i] += 1;
            }
            h.count += 1;
            h.sum += value;
        });
    }

    pub fn render(&self, out: &mut String) {
        self.meta.header(out, Kind::Histogram);
        let name = self.meta.name;
        let labels = self.meta.labels;
        for (values, h) in self.series.snapshot() {
            let mut cumulative = 0;
            for (i, bound) in self.bounds.iter().enumerate() {
                cumulative += h.buckets.get(i).copied().unwrap_or(0);
                let le = format_value(*bound);
                sample(
                    out,
                    name,
                    "_bucket",
                    labels,
                    &values,
                    Some(&le),
                    cumulative as f64,
                );
            }
            sample(
                out,
                name,
                "_bucket",
                labels,
                &values,
                Some("+Inf"),
                h.count as f64,
            );
            sample(out, name, "_sum", labels, &values, None, h.sum);
            sample(out, name, "_count", labels, &values, None, h.count as f64);
        }
    }
}

/// One sample line: `name{k="v",…,le="…"} value`.
fn sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    keys: &[&str],
    values: &[String],
    le: Option<&str>,
    value: f64,
) {
    out.push_str(name);
    out.push_str(suffix);
    let mut pairs: Vec<(&str, &str)> = keys
        .iter()
        .copied()
        .zip(values.iter().map(String::as_str))
        .collect();
    if let Some(le) = le {
        pairs.push(("le", le));
    }
    if !pairs.is_empty() {
        out.push('{');
        for (i, (k, v)) in pairs.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape_label(v));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {}", format_value(value));
}

fn format_value(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.is_nan() {
        "NaN".into()
    } else {
        format!("{v}")
    }
}

/// A label value: backslash, double quote and line feed escaped.
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_one_line_per_label_set() {
        let c = Counter::new("x_total", "Things.", &["kind", "result"]);
        c.inc(&["a", "ok"]);
        c.add(&["a", "ok"], 2);
        c.inc(&["b", "no"]);
        let mut out = String::new();
        c.render(&mut out);
        assert_eq!(
            out,
            "# HELP x_total Things.\n# TYPE x_total counter\n\
             x_total{kind=\"a\",result=\"ok\"} 3\nx_total{kind=\"b\",result=\"no\"} 1\n"
        );
        assert_eq!(c.get(&["a", "ok"]), 3);
        assert_eq!(c.get(&["c", "ok"]), 0);
    }

    /// The borrowed form orders as the owned one does, for every pair of
    /// these sets (prefixes, empty values, byte order), so a lookup by
    /// `&[&str]` finds exactly the set an owned key would.
    #[test]
    fn borrowed_label_sets_order_as_owned_ones() {
        let sets: [&[&str]; 9] = [
            &[],
            &[""],
            &["a"],
            &["a", ""],
            &["a", "b"],
            &["ab"],
            &["b"],
            &["a", "b", "c"],
            &["\u{e9}", "a"],
        ];
        for x in sets {
            for y in sets {
                let owned = |s: &[&str]| s.iter().map(|v| (*v).to_owned()).collect::<Vec<_>>();
                let (ox, oy) = (owned(x), owned(y));
                let (bx, by): (&dyn LabelValues, &dyn LabelValues) = (&x, &y);
                assert_eq!(bx.cmp(by), ox.cmp(&oy), "{x:?} {y:?}");
                assert_eq!(bx == by, ox == oy, "{x:?} {y:?}");
                let stored: &dyn LabelValues = std::borrow::Borrow::borrow(&ox);
                assert_eq!(stored.cmp(by), ox.cmp(&oy), "{x:?} {y:?}");
            }
        }
        let c = Counter::new("w_total", "W.", &["a", "b"]);
        c.inc(&["a", "b"]);
        c.inc(&["a", "b"]);
        c.inc(&["ab", ""]);
        assert_eq!((c.get(&["a", "b"]), c.get(&["ab", ""])), (2, 1));
        assert_eq!(c.series.snapshot().len(), 2);
    }

    #[test]
    fn a_family_past_its_bound_counts_under_overflow() {
        let c = Counter::bounded("y_total", "Y.", &["id"], 3);
        for i in 0..10 {
            c.inc(&[&format!("tkt_{i}")]);
        }
        c.inc(&["tkt_0"]);
        let mut out = String::new();
        c.render(&mut out);
        let samples: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "y_total{id=\"_overflow\"} 7",
                "y_total{id=\"tkt_0\"} 2",
                "y_total{id=\"tkt_1\"} 1",
                "y_total{id=\"tkt_2\"} 1",
            ]
        );
    }

    #[test]
    fn histograms_are_cumulative_with_inf_sum_and_count() {
        let h = Histogram::new("z_seconds", "Z.", &[], &[0.1, 1.0]);
        for v in [0.05, 0.5, 0.5, 3.0] {
            h.observe(&[], v);
        }
        let mut out = String::new();
        h.render(&mut out);
        let samples: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "z_seconds_bucket{le=\"0.1\"} 1",
                "z_seconds_bucket{le=\"1\"} 3",
                "z_seconds_bucket{le=\"+Inf\"} 4",
                "z_seconds_sum 4.05",
                "z_seconds_count 4",
            ]
        );
    }

    #[test]
    fn gauges_go_both_ways_and_labels_are_escaped() {
        let g = Gauge::new("g", "A \"gauge\"\nof things.", &["k"]);
        g.add(&["a\"b\\c\nd"], 2);
        g.add(&["a\"b\\c\nd"], -3);
        g.set(&["e"], 7);
        let mut out = String::new();
        g.render(&mut out);
        assert_eq!(
            out,
            "# HELP g A \"gauge\"\\nof things.\n# TYPE g gauge\n\
             g{k=\"a\\\"b\\\\c\\nd\"} -1\ng{k=\"e\"} 7\n"
        );
    }

    #[test]
    fn only_loopback_addresses_serve() {
        for (addr, ok) in [
            ("127.0.0.1:9464", true),
            ("127.3.4.5:1", true),
            ("[::1]:9464", true),
            ("0.0.0.0:9464", false),
            ("10.0.0.1:9464", false),
            ("[::]:9464", false),
        ] {
            let m = MetricsListen {
                listen: addr.parse().unwrap(),
            };
            assert_eq!(m.check().is_ok(), ok, "{addr}");
        }
    }
}
