//! The process series Prometheus' own clients export under the standard `process_*` names (CPU
//! time, resident memory, open and maximum file descriptors, start time), read from `/proc/self`
//! at scrape time, `gregor_build_info`, and the async runtime's workers (`gregor_runtime_*`).
//! Parsing is pure and reads its text through [`ProcFs`], so it is tested on fixed text; a
//! series whose file is missing or unreadable (not Linux) is left out rather than reported as 0.

use std::io;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Where the `/proc` files come from: the real `/proc`, or fixed text in tests.
pub trait ProcFs {
    /// The text of `/proc/<path>` (`self/stat`, `stat`, ...).
    fn read(&self, path: &str) -> io::Result<String>;
    /// The number of entries of the directory `/proc/<path>`.
    fn entries(&self, path: &str) -> io::Result<usize>;
}

/// The real `/proc`.
pub struct RealProc;

impl ProcFs for RealProc {
    fn read(&self, path: &str) -> io::Result<String> {
        std::fs::read_to_string(format!("/proc/{path}"))
    }

    fn entries(&self, path: &str) -> io::Result<usize> {
        Ok(std::fs::read_dir(format!("/proc/{path}"))?.count())
    }
}

/// The process as read once; `None` where the reading failed.
#[derive(Debug, Default, PartialEq)]
pub struct ProcessSample {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<i64>,
    pub open_fds: Option<i64>,
    /// The soft limit on open files; `None` when unlimited.
    pub max_fds: Option<i64>,
    /// Seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
}

/// Reads the process's series from `proc`, with the kernel's clock ticks per second (the unit
/// of CPU and start times in `/proc/self/stat`).
pub fn sample(proc: &dyn ProcFs, ticks_per_second: f64) -> ProcessSample {
    let stat = proc.read("self/stat").ok();
    let stat = stat.as_deref().and_then(parse_stat);
    let boot = proc.read("stat").ok().and_then(|s| parse_boot_time(&s));
    ProcessSample {
        cpu_seconds: stat.map(|s| (s.utime + s.stime) as f64 / ticks_per_second),
        resident_bytes: proc
            .read("self/status")
            .ok()
            .and_then(|s| parse_resident_bytes(&s)),
        open_fds: proc
            .entries("self/fd")
            .ok()
            .and_then(|n| i64::try_from(n).ok()),
        max_fds: proc
            .read("self/limits")
            .ok()
            .and_then(|s| parse_max_open_files(&s)),
        start_time_seconds: stat
            .zip(boot)
            .map(|(s, boot)| boot as f64 + s.start_ticks as f64 / ticks_per_second),
    }
}

/// The fields of `/proc/self/stat` used here, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stat {
    utime: u64,
    stime: u64,
    /// When the process started, after boot.
    start_ticks: u64,
}

/// `/proc/<pid>/stat`: `pid (comm) state ppid ...`. The command name may hold spaces and
/// parentheses, so fields are counted from the last `)`; the one after it (state) is field 3.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: field(14)?,
        stime: field(15)?,
        start_ticks: field(22)?,
    })
}

/// `btime` of `/proc/stat`: the boot time in seconds since the epoch.
fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// `VmRSS:   1234 kB` of `/proc/self/status`, in bytes.
fn parse_resident_bytes(text: &str) -> Option<i64> {
    let line = text.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let mut parts = line.split_whitespace();
    let value: i64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") => value.checked_mul(1024),
        _ => None,
    }
}

/// The soft limit of `Max open files` in `/proc/self/limits` (`None` when unlimited).
fn parse_max_open_files(text: &str) -> Option<i64> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// The kernel's clock ticks per second (`sysconf(_SC_CLK_TCK)`; 100 if it does not say).
pub fn ticks_per_second() -> f64 {
    // SAFETY: sysconf reads a constant of the C library; it has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
}

/// The commit the broker was built from (`build.rs`: `git rev-parse HEAD`, or `GREGOR_COMMIT`
/// when set; `unknown` outside a git checkout).
pub const COMMIT: &str = env!("GREGOR_COMMIT");

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// Registers the process series of `s` that could be read, and the build info.
pub fn register(r: &mut Registry, s: &ProcessSample) {
    if let Some(v) = s.cpu_seconds {
        // A counter in Prometheus' clients; its value is the kernel's, so it is set here.
        let c = prometheus_client::metrics::counter::ConstCounter::new(v);
        r.register(
            "process_cpu_seconds",
            "Total user and system CPU time spent, in seconds",
            c,
        );
    }
    let gauges: [(&str, &str, Option<i64>); 3] = [
        (
            "process_resident_memory_bytes",
            "Resident memory size, in bytes",
            s.resident_bytes,
        ),
        ("process_open_fds", "Open file descriptors", s.open_fds),
        (
            "process_max_fds",
            "Maximum number of open file descriptors (the soft limit)",
            s.max_fds,
        ),
    ];
    for (name, help, value) in gauges {
        if let Some(v) = value {
            let g = Gauge::<i64, std::sync::atomic::AtomicI64>::default();
            g.set(v);
            r.register(name, help, g);
        }
    }
    if let Some(v) = s.start_time_seconds {
        let g = FloatGauge::default();
        g.set(v);
        r.register(
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch, in seconds",
            g,
        );
    }
    let info = Family::<BuildLabels, Gauge>::default();
    info.get_or_create(&BuildLabels {
        version: env!("CARGO_PKG_VERSION"),
        commit: COMMIT,
    })
    .set(1);
    r.register(
        "gregor_build_info",
        "1, labelled with the version and the git commit the broker was built from",
        info,
    );
}

/// The async runtime's worker threads, which run every request handler (and replication and
/// the coordinators): Kafka's request handler pool has a fixed number of threads whose idle
/// ratio it exports; here handlers are tasks, so the workers' busy time is exported instead,
/// and `1 - rate(busy) / workers` is their idle ratio.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RuntimeSample {
    pub workers: usize,
    /// Summed over the workers since the runtime started.
    pub busy_seconds: f64,
    /// Tasks waiting in the runtime's shared queue for a worker.
    pub global_queue_depth: usize,
}

/// The runtime the caller runs on; `None` outside one.
pub fn runtime_sample() -> Option<RuntimeSample> {
    let m = tokio::runtime::Handle::try_current().ok()?.metrics();
    let workers = m.num_workers();
    let busy_seconds = (0..workers)
        .map(|w| m.worker_total_busy_duration(w).as_secs_f64())
        .sum();
    Some(RuntimeSample {
        workers,
        busy_seconds,
        global_queue_depth: m.global_queue_depth(),
    })
}

pub fn register_runtime(r: &mut Registry, s: &RuntimeSample) {
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::gauge::ConstGauge;
    let as_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    r.register(
        "gregor_runtime_workers",
        "Worker threads of the async runtime that runs the request handlers",
        ConstGauge::new(as_i64(s.workers)),
    );
    r.register(
        "gregor_runtime_worker_busy_seconds",
        "Time the runtime's workers spent running tasks, summed over the workers (idle ratio: 1 - rate / gregor_runtime_workers)",
        ConstCounter::new(s.busy_seconds),
    );
    r.register(
        "gregor_runtime_global_queue_depth",
        "Tasks waiting in the runtime's shared queue for a worker",
        ConstGauge::new(as_i64(s.global_queue_depth)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// `/proc` as fixed text; a path it does not hold is not found.
    struct FixedProc {
        files: HashMap<&'static str, &'static str>,
        fds: Option<usize>,
    }

    impl ProcFs for FixedProc {
        fn read(&self, path: &str) -> io::Result<String> {
            self.files
                .get(path)
                .map(|s| s.to_string())
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }

        fn entries(&self, path: &str) -> io::Result<usize> {
            match (path, self.fds) {
                ("self/fd", Some(n)) => Ok(n),
                _ => Err(io::Error::from(io::ErrorKind::NotFound)),
            }
        }
    }

    // A command name with a space and a parenthesis, as a thread renamed by a user could have.
    const STAT: &str = "4242 (gregor (x) b) S 1 4242 4242 0 -1 4194560 2400 0 0 0 \
        250 130 0 0 20 0 9 0 7000 1234567 890 18446744073709551615 1 1 0 0 0 0 0 4096 17663 0 0 0 17 1 0 0 0 0 0\n";
    const STATUS: &str = "Name:\tgregor\nVmPeak:\t 900000 kB\nVmRSS:\t   51200 kB\nThreads:\t9\n";
    const LIMITS: &str =
        "Limit                     Soft Limit           Hard Limit           Units     \n\
        Max cpu time              unlimited            unlimited            seconds   \n\
        Max open files            1024                 524288               files     \n";
    const PROC_STAT: &str = "cpu  1 2 3 4\nintr 5\nbtime 1700000000\nprocesses 77\n";

    fn linux() -> FixedProc {
        FixedProc {
            files: HashMap::from([
                ("self/stat", STAT),
                ("self/status", STATUS),
                ("self/limits", LIMITS),
                ("stat", PROC_STAT),
            ]),
            fds: Some(37),
        }
    }

    #[test]
    fn reads_each_series_from_proc_text() {
        let s = sample(&linux(), 100.0);
        assert_eq!(
            s,
            ProcessSample {
                cpu_seconds: Some(3.8),
                resident_bytes: Some(51200 * 1024),
                open_fds: Some(37),
                max_fds: Some(1024),
                start_time_seconds: Some(1_700_000_070.0),
            }
        );
    }

    #[test]
    fn the_clock_tick_scales_cpu_and_start_time() {
        let s = sample(&linux(), 250.0);
        assert_eq!(s.cpu_seconds, Some(380.0 / 250.0));
        assert_eq!(s.start_time_seconds, Some(1_700_000_000.0 + 28.0));
    }

    #[test]
    fn unreadable_or_odd_files_leave_their_series_out() {
        let mut p = linux();
        p.files.remove("stat");
        p.files
            .insert("self/limits", "Max open files unlimited unlimited files\n");
        p.files.insert("self/status", "VmRSS:\t12 MB\n");
        p.fds = None;
        let s = sample(&p, 100.0);
        assert_eq!(s.cpu_seconds, Some(3.8));
        assert_eq!(s.start_time_seconds, None);
        assert_eq!(s.max_fds, None);
        assert_eq!(s.resident_bytes, None);
        assert_eq!(s.open_fds, None);
        assert_eq!(
            sample(
                &FixedProc {
                    files: HashMap::new(),
                    fds: None
                },
                100.0
            ),
            ProcessSample::default()
        );
    }

    #[test]
    fn a_truncated_stat_line_is_no_sample() {
        assert_eq!(parse_stat("1 (a) S 1 2 3"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn registered_names_are_prometheus_standard_ones() {
        let mut r = Registry::default();
        register(&mut r, &sample(&linux(), 100.0));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).expect("encoded");
        for line in [
            "# TYPE process_cpu_seconds counter",
            "process_cpu_seconds_total 3.8",
            "process_resident_memory_bytes 52428800",
            "process_open_fds 37",
            "process_max_fds 1024",
            "process_start_time_seconds 1700000070.0",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
        }
        let info = format!(
            "gregor_build_info{{version=\"{}\",commit=\"{COMMIT}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert!(out.lines().any(|l| l == info), "{info} in\n{out}");
    }

    #[test]
    fn the_runtime_series_are_registered_with_their_values() {
        let mut r = Registry::default();
        let s = RuntimeSample {
            workers: 2,
            busy_seconds: 1.5,
            global_queue_depth: 3,
        };
        register_runtime(&mut r, &s);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).expect("encoded");
        for line in [
            "gregor_runtime_workers 2",
            "# TYPE gregor_runtime_worker_busy_seconds counter",
            "gregor_runtime_worker_busy_seconds_total 1.5",
            "gregor_runtime_global_queue_depth 3",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 3)]
    async fn the_runtime_sample_reads_the_runtime_it_runs_on() {
        let s = runtime_sample().expect("on a runtime");
        assert_eq!(s.workers, 3);
        assert!(s.busy_seconds.is_finite() && s.busy_seconds >= 0.0, "{s:?}");
    }

    #[test]
    fn no_runtime_no_sample() {
        assert_eq!(runtime_sample(), None);
    }

    #[test]
    fn the_real_proc_is_read_on_linux() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let s = sample(&RealProc, ticks_per_second());
        assert!(s.resident_bytes.is_some_and(|b| b > 0));
        assert!(s.open_fds.is_some_and(|n| n > 0));
        assert!(s.start_time_seconds.is_some_and(|t| t > 1_600_000_000.0));
    }
}
