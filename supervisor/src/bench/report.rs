//! The benchmark's result as data, and its two renderings (a table for
//! people, JSON for scripts). Pure: tested without running anything.

use std::fmt::Write;

use serde_json::{json, Value};

use super::{FsCost, Memory, Summary};

/// One contender's start-up times.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub name: &'static str,
    pub summary: Summary,
}

/// One contender's memory while idle.
#[derive(Debug, Clone, PartialEq)]
pub struct IdleMemory {
    pub name: &'static str,
    /// The process the caller started (for gatehouse, the host-side waiter).
    pub host: Memory,
    /// Everything below it: the sandbox.
    pub inside: Memory,
}

/// What `gatehouse sandbox bench` measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub iterations: usize,
    pub warmup: usize,
    pub rows: Vec<Row>,
    pub idle: Vec<IdleMemory>,
    /// The per-ticket work dir filesystem's one-time steps (as root).
    pub work_dir_fs: Option<FsCost>,
}

impl Report {
    /// The median of contender `name`, NaN if it has none.
    fn median(&self, name: &str) -> f64 {
        self.rows
            .iter()
            .find(|r| r.name == name)
            .map(|r| r.summary.median_ms)
            .unwrap_or(f64::NAN)
    }

    /// `row`'s median as a multiple of bwrap's and of fork/exec's.
    pub fn ratios(&self, row: &Row) -> (f64, f64) {
        (
            row.summary.median_ms / self.median("bwrap"),
            row.summary.median_ms / self.median("fork/exec"),
        )
    }

    pub fn to_json(&self) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                let (vs_bwrap, vs_fork_exec) = self.ratios(r);
                json!({"name": r.name, "summary": r.summary,
                "vs_bwrap": vs_bwrap, "vs_fork_exec": vs_fork_exec})
            })
            .collect();
        let mem: Vec<Value> = self
            .idle
            .iter()
            .map(|m| json!({"name": m.name, "host_side": m.host, "sandbox_side": m.inside}))
            .collect();
        json!({"iterations": self.iterations, "start_up": rows, "idle_memory": mem,
            "work_dir_fs_ms": self.work_dir_fs})
    }

    /// The report as a table, one line per contender, then idle memory.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let (iterations, warmup) = (self.iterations, self.warmup);
        let _ = writeln!(
            out,
            "start-up of /bin/true, {iterations} runs each, interleaved in shuffled order ({warmup} warm-up)"
        );
        let _ = writeln!(
            out,
            "{:<20} {:>10} {:>10} {:>10} {:>9} {:>11}",
            "", "median ms", "p95 ms", "min ms", "vs bwrap", "vs fork/exec"
        );
        for r in &self.rows {
            let (vs_bwrap, vs_fork_exec) = self.ratios(r);
            let s = &r.summary;
            let _ = writeln!(
                out,
                "{:<20} {:>10.2} {:>10.2} {:>10.2} {:>8.2}x {:>10.1}x",
                r.name, s.median_ms, s.p95_ms, s.min_ms, vs_bwrap, vs_fork_exec
            );
        }
        let _ = writeln!(out, "idle memory (sleep 5), KiB          RSS       PSS");
        for m in &self.idle {
            let name = m.name;
            let _ = writeln!(
                out,
                "{name:<20} host side   {:>9} {:>9}",
                m.host.rss_kib, m.host.pss_kib
            );
            let _ = writeln!(
                out,
                "{name:<20} in sandbox  {:>9} {:>9}",
                m.inside.rss_kib, m.inside.pss_kib
            );
        }
        match &self.work_dir_fs {
            Some(c) => {
                let _ = writeln!(
                    out,
                    "work dir filesystem (64 MiB, once per ticket): make {:.2} ms, reuse {:.3} ms, remove {:.2} ms",
                    c.make_ms, c.reuse_ms, c.remove_ms
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "work dir filesystem: not measured (needs root and loop devices, ext4, mkfs.ext4: see `gatehouse doctor`)"
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(median_ms: f64) -> Summary {
        Summary {
            median_ms,
            p95_ms: median_ms * 2.0,
            min_ms: median_ms / 2.0,
        }
    }

    fn report() -> Report {
        Report {
            iterations: 200,
            warmup: 10,
            rows: vec![
                Row {
                    name: "fork/exec",
                    summary: summary(1.0),
                },
                Row {
                    name: "bwrap",
                    summary: summary(4.0),
                },
                Row {
                    name: "gatehouse",
                    summary: summary(5.0),
                },
            ],
            idle: vec![IdleMemory {
                name: "gatehouse",
                host: Memory {
                    rss_kib: 100,
                    pss_kib: 50,
                },
                inside: Memory {
                    rss_kib: 300,
                    pss_kib: 120,
                },
            }],
            work_dir_fs: Some(FsCost {
                make_ms: 21.5,
                reuse_ms: 0.5,
                remove_ms: 9.25,
            }),
        }
    }

    #[test]
    fn ratios_are_against_bwrap_and_fork_exec() {
        let r = report();
        assert_eq!(r.ratios(&r.rows[2]), (1.25, 5.0));
        assert_eq!(r.ratios(&r.rows[1]), (1.0, 4.0));
        let mut without = r.clone();
        without.rows.remove(1);
        assert!(without.ratios(&without.rows[1]).0.is_nan());
    }

    #[test]
    fn the_table_has_a_line_per_contender_and_memory() {
        let table = report().table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2 + 3 + 1 + 2 + 1, "{table}");
        assert!(lines[0].contains("200 runs each") && lines[0].contains("(10 warm-up)"));
        assert_eq!(
            lines[4],
            "gatehouse                  5.00      10.00       2.50     1.25x        5.0x"
        );
        assert_eq!(
            lines[6],
            "gatehouse            host side         100        50"
        );
        assert_eq!(
            lines[7],
            "gatehouse            in sandbox        300       120"
        );
        assert_eq!(
            lines[8],
            "work dir filesystem (64 MiB, once per ticket): make 21.50 ms, reuse 0.500 ms, remove 9.25 ms"
        );
        let mut unmeasured = report();
        unmeasured.work_dir_fs = None;
        assert!(unmeasured.table().ends_with("see `gatehouse doctor`)\n"));
    }

    #[test]
    fn the_json_names_each_contender_with_its_ratios() {
        let v = report().to_json();
        assert_eq!(v["iterations"], 200);
        assert_eq!(v["start_up"][2]["name"], "gatehouse");
        assert_eq!(v["start_up"][2]["vs_bwrap"], 1.25);
        assert_eq!(v["start_up"][2]["vs_fork_exec"], 5.0);
        assert_eq!(v["start_up"][2]["summary"]["median_ms"], 5.0);
        assert_eq!(v["idle_memory"][0]["host_side"]["rss_kib"], 100);
        assert_eq!(v["idle_memory"][0]["sandbox_side"]["pss_kib"], 120);
        assert_eq!(v["work_dir_fs_ms"]["make_ms"], 21.5);
    }
}
