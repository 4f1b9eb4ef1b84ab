//! The process's own figures, read from `/proc/self` (Linux) at each scrape, under the names
//! Prometheus's client libraries use for them, so that standard dashboards find them. They
//! are written straight into the exposition text (the CPU time is a counter of fractional
//! seconds, which the facade's integer counters cannot hold).

use std::fmt::Write;

/// The process figures in the text format; figures the platform does not offer are left out.
pub fn render() -> String {
    let mut out = String::new();
    let mut put = |name: &str, kind: &str, help: &str, value: f64| {
        let _ = write!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
        );
    };
    if let Some(cpu) = cpu_seconds() {
        put(
            "process_cpu_seconds_total",
            "counter",
            "CPU time (user and system) of the process in seconds.",
            cpu,
        );
    }
    if let Some(rss) = resident_bytes() {
        put(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory of the process in bytes.",
            rss as f64,
        );
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        put(
            "process_open_fds",
            "gauge",
            "Open file descriptors of the process.",
            dir.count() as f64,
        );
    }
    if let Some(max) = max_fds() {
        put(
            "process_max_fds",
            "gauge",
            "Limit of open file descriptors of the process.",
            max as f64,
        );
    }
    out
}

/// User + system time from `/proc/self/stat` (fields 14 and 15, in clock ticks of 1/100 s:
/// the kernel's USER_HZ on every Linux architecture).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    Some((user + system) as f64 / 100.0)
}

fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn max_fds() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_process_figures_are_read() {
        let text = super::render();
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_max_fds",
        ] {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} in {text}"));
            let value: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
            assert!(value >= 0.0, "{line}");
        }
        let rss: f64 = text
            .lines()
            .find(|l| l.starts_with("process_resident_memory_bytes "))
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            rss > 1_000_000.0,
            "a test process holds more than a megabyte: {rss}"
        );
    }
}
