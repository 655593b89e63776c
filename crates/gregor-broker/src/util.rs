//! Small shared helpers of the shell.

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// What a deterministic simulation (gregor-sim) replaces in this process: the wall clock, and
/// the blocking pool (whose threads finish in an order no seed controls). Installed at most once
/// per process, before any broker starts; a broker process never installs one.
#[derive(Debug, Clone, Copy)]
pub struct Simulation {
    /// Milliseconds since the Unix epoch, as the simulated world's clock says.
    pub now_ms: fn() -> i64,
}

static SIMULATION: OnceLock<Simulation> = OnceLock::new();

/// Installs the simulation's clock and inline file work for the rest of the process. Returns
/// false if one was installed already (the first one stays).
pub fn install_simulation(sim: Simulation) -> bool {
    SIMULATION.set(sim).is_ok()
}

/// Classic replication bugs the simulator plants to show that its checker finds them. Only a
/// thread of a process that installed a [`Simulation`] can turn one on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlantedBug {
    /// The leader takes the high watermark as the largest durable log end offset over the ISR
    /// instead of the smallest: an `acks=all` write is acknowledged once the leader alone has
    /// it.
    HighWatermarkMaxOverIsr,
    /// A follower that must find where its log leaves the new leader's truncates to its own
    /// high watermark instead of asking the leader for the end of its last epoch (Kafka before
    /// KIP-101).
    TruncateToHighWatermark,
    /// A leader shrinks its ISR for itself as soon as it proposes the shrink, before the
    /// controller commits it (so the high watermark stops waiting for the dropped follower,
    /// which the controller may still elect).
    IsrShrinkBeforeCommit,
    /// A follower appends fetched batches without syncing them before its next fetch, which
    /// tells the leader they are on its disk: an `acks=all` write can be acknowledged while
    /// only the leader has it durably.
    SkipFollowerSync,
    /// The group coordinator answers a follower's SyncGroup that arrives before the leader's
    /// assignment with the follower's assignment of the previous generation (two members can
    /// then own a partition in one generation).
    StaleSyncAssignment,
    /// The controller's liveness probe (on taking over, or when a broker's heartbeat
    /// connection closes) takes a broker whose listener accepts for gone, and fences it.
    ProbeFencesLive,
    /// A follower stamps every batch it fetches with the leader epoch it fetches in, instead
    /// of keeping the epoch the batch was written in: its log leaves the leader's below the
    /// high watermark (and its epoch cache with it), which no consumer of the leader sees.
    FollowerRestampsEpoch,
    /// A leader serves consumers up to its log end instead of its high watermark: they read
    /// records no follower may have, which a change of leader can take back.
    ConsumerReadsUncommitted,
    /// A follower appends fetched batches without recording their idempotent producers: once
    /// it leads, a producer's retry of a batch it already holds is written a second time.
    FollowerSkipsProducerState,
    /// A group coordinator loading a `__consumer_offsets` partition keeps the first commit of
    /// each group's partition instead of the last (as if compaction had left one record per
    /// key): after the coordinator moves, members resume from an old offset.
    ReplayKeepsFirstCommit,
    /// The group coordinator answers OffsetFetch with the offset after the committed one
    /// (taking a commit for the last record consumed): a member resuming from it skips one.
    FetchPastCommit,
    /// The metadata image keeps the leader epoch on an election that also sets the ISR
    /// (planted in gregor-meta's images): two brokers lead one epoch in turn.
    ElectionKeepsLeaderEpoch,
}

thread_local! {
    static PLANTED: std::cell::Cell<Option<PlantedBug>> = const { std::cell::Cell::new(None) };
    /// Simulated time on a thread doing a simulation's file work (time stands still meanwhile).
    static FROZEN_NOW: std::cell::Cell<Option<i64>> = const { std::cell::Cell::new(None) };
}

/// Plants `bug` (or none) in the brokers this thread simulates. Ignored without a simulation.
pub fn plant_on_this_thread(bug: Option<PlantedBug>) {
    if SIMULATION.get().is_some() {
        PLANTED.with(|p| p.set(bug));
        // The one planted bug that lives in gregor-meta's images.
        gregor_meta::plant_election_keeps_leader_epoch(
            bug == Some(PlantedBug::ElectionKeepsLeaderEpoch),
        );
    }
}

/// Whether `bug` is planted on this thread.
pub(crate) fn planted(bug: PlantedBug) -> bool {
    SIMULATION.get().is_some() && PLANTED.with(|p| p.get()) == Some(bug)
}

tokio::task_local! {
    /// Under a simulation: how far the wall clock of the broker this task belongs to is off
    /// the simulated world's (a clock jump). Tasks a broker spawns keep it ([`spawn`]).
    static CLOCK_SKEW: Option<Arc<AtomicI64>>;
}

/// Runs `fut`, and every task it spawns through [`spawn`], with a wall clock `skew`
/// milliseconds off the simulated world's; the simulator changes `skew` to make that broker's
/// clock jump. Without an installed simulation the skew is ignored.
pub fn with_clock_skew<F: Future>(skew: Arc<AtomicI64>, fut: F) -> impl Future<Output = F::Output> {
    CLOCK_SKEW.scope(Some(skew), fut)
}

/// `fut` keeping the clock of the task that wraps it (see [`with_clock_skew`]), for tasks
/// spawned some other way than [`spawn`] (a `JoinSet`, another runtime's handle).
pub fn inherit_clock<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    let skew = match SIMULATION.get() {
        Some(_) => CLOCK_SKEW.try_with(Clone::clone).ok().flatten(),
        None => None,
    };
    CLOCK_SKEW.scope(skew, fut)
}

/// `tokio::spawn` for the broker's tasks: under a simulation a task keeps the clock of the
/// broker that spawned it, so one broker's clock can jump while the others' do not.
#[allow(clippy::disallowed_methods)] // the one place that may call it
pub fn spawn<F>(fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(inherit_clock(fut))
}

/// Wall-clock milliseconds, the only clock the shell reads (state machines get it as input).
pub fn now_ms() -> i64 {
    if let Some(sim) = SIMULATION.get() {
        if let Some(frozen) = FROZEN_NOW.with(|t| t.get()) {
            return frozen;
        }
        let skew = CLOCK_SKEW
            .try_with(|s| s.as_ref().map_or(0, |s| s.load(Ordering::SeqCst)))
            .unwrap_or(0);
        return (sim.now_ms)() + skew;
    }
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Runs blocking file work (log appends, fsync) off the async workers. Under a simulation the
/// calling thread waits for it (on a thread of its own, where blocking on a lock is allowed):
/// simulated time stands still meanwhile, and tasks interleave the same way on every run; the
/// caller then waits, in simulated time, whatever the syncs of a simulated slow disk owe.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (v, owed) = blocking_owing(f).await;
    wait_simulated_disk(owed).await;
    v
}

/// [`blocking`] for a caller that holds an async lock: what a simulated slow disk's syncs owe
/// is returned, for the caller to wait out ([`wait_simulated_disk`]) once it has let go of the
/// lock. Under a simulation, file work runs inline on the simulation's one thread, so a task
/// asleep while holding a lock that other file work takes with `blocking_lock` would stop the
/// whole simulated world (zero outside a simulation).
pub async fn blocking_owing<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, std::time::Duration) {
    if SIMULATION.get().is_some() {
        let now = now_ms();
        let planted = PLANTED.with(|p| p.get());
        let worker = std::thread::spawn(move || {
            FROZEN_NOW.with(|t| t.set(Some(now)));
            PLANTED.with(|p| p.set(planted));
            (f(), gregor_log::take_simulated_delay())
        });
        return match worker.join() {
            Ok(done) => done,
            Err(panic) => std::panic::resume_unwind(panic),
        };
    }
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => (v, std::time::Duration::ZERO),
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Waits out, in the runtime's (simulated) time, what a simulated slow disk's syncs owe.
pub async fn wait_simulated_disk(owed: std::time::Duration) {
    if !owed.is_zero() {
        tokio::time::sleep(owed).await;
    }
}

/// Runs `f` on every item with up to `threads` threads (at least one). For file work bound by
/// fsync latency: concurrent fsyncs share the file system's journal commits, so opening or
/// closing many partition logs in parallel takes a fraction of doing it one by one.
pub fn for_each_parallel<T: Send>(items: Vec<T>, threads: usize, f: impl Fn(T) + Sync) {
    // Always on threads of its own, even one: callers may block there (a runtime thread may
    // not).
    // Under a simulation, one: file work then happens in the same order on every run.
    let threads = if SIMULATION.get().is_some() {
        1
    } else {
        threads.clamp(1, items.len().max(1))
    };
    let queue = std::sync::Mutex::new(items.into_iter());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let next = queue
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .next();
                match next {
                    Some(item) => f(item),
                    None => return,
                }
            });
        }
    });
}

/// The cluster id, kept in `meta.properties` in the data directory (created on first start,
/// a random UUID in Kafka's URL-safe base64 form).
pub fn cluster_id(data_dir: &std::path::Path) -> std::io::Result<String> {
    cluster_id_on(&gregor_log::Disk::real(), data_dir)
}

/// The cluster id of a node of the quorum `voters`: the one its data directory records; for a
/// new directory, `explicit` (`--cluster-id`, like `kafka-storage format --cluster-id`), else
/// an id derived from the configured `controller.quorum.voters` (so nodes configured alike
/// agree without a format step, whether the quorum has one voter or several), else, for a
/// cluster of one without the setting (`voters` empty), a new random one. A directory of
/// another cluster is an error.
pub fn cluster_id_for(
    disk: &gregor_log::Disk,
    data_dir: &std::path::Path,
    voters: &std::collections::BTreeMap<u64, String>,
    explicit: Option<&str>,
) -> std::io::Result<String> {
    let path = data_dir.join("meta.properties");
    if path.exists() {
        let id = cluster_id_on(disk, data_dir)?;
        if let Some(want) = explicit.filter(|w| *w != id) {
            return Err(std::io::Error::other(format!(
                "{} belongs to cluster {id}, not --cluster-id {want}",
                data_dir.display()
            )));
        }
        return Ok(id);
    }
    let id = match explicit {
        Some(id) => id.to_string(),
        None if !voters.is_empty() => {
            let text: Vec<String> = voters.iter().map(|(id, a)| format!("{id}@{a}")).collect();
            kafka_uuid(uuid::Uuid::new_v5(
                &uuid::Uuid::NAMESPACE_OID,
                text.join(",").as_bytes(),
            ))
        }
        None => return cluster_id_on(disk, data_dir),
    };
    disk.write_atomic(&path, format!("version=1\ncluster.id={id}\n").as_bytes())
        .map_err(std::io::Error::other)?;
    Ok(id)
}

/// [`cluster_id`] through `disk` (tests pass one that models power loss). The new file is
/// written durably, its directory entry included: a cluster id that vanished after a power
/// loss would be replaced by a new one, and the broker would no longer match its own data.
pub fn cluster_id_on(
    disk: &gregor_log::Disk,
    data_dir: &std::path::Path,
) -> std::io::Result<String> {
    let path = data_dir.join("meta.properties");
    if let Ok(text) = std::fs::read_to_string(&path) {
        if let Some(id) = text.lines().find_map(|l| l.strip_prefix("cluster.id=")) {
            return Ok(id.trim().to_string());
        }
    }
    let id = kafka_uuid(uuid::Uuid::new_v4());
    disk.write_atomic(&path, format!("version=1\ncluster.id={id}\n").as_bytes())
        .map_err(std::io::Error::other)?;
    Ok(id)
}

/// Kafka prints UUIDs as 22 characters of URL-safe base64 without padding.
pub fn kafka_uuid(u: uuid::Uuid) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = u.as_bytes();
    let mut out = String::with_capacity(22);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for b in bytes {
        acc = (acc << 8) | *b as u32;
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(ALPHABET[((acc >> bits) & 63) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((acc << (6 - bits)) & 63) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `meta.properties` survives a power loss (the disk model drops unsynced bytes and
    /// directory entries): the cluster id after the reboot is the one handed out before it.
    #[test]
    fn cluster_id_survives_a_power_loss() {
        let dir = tempfile::tempdir().expect("temp dir");
        let faults = gregor_log::FaultInjector::power_model(dir.path()).expect("model");
        let disk = gregor_log::Disk::with_faults(faults.clone());
        let id = cluster_id_on(&disk, dir.path()).expect("cluster id");
        faults.power_loss(None).expect("power loss");
        assert_eq!(cluster_id_on(&disk, dir.path()).expect("cluster id"), id);
    }
}
