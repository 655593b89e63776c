//! How the driver applies and heals each fault: crashes and boots, power cuts, links cut or
//! held (counted per fault in `links.rs`, so episodes may overlap), disk faults, slow disks,
//! clock jumps and cascading crashes.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Active, CascadeState, Driver, PendingCut};
use crate::links::LinkOp;
use crate::node::host_name;
use crate::options::PlantedBug;
use crate::property::{Property, Violation};
use crate::scenario::{Episode, Fault};

/// A cascading crash waits this long for a successor to take over (a broker session timeout
/// and an election) before it ends without a second crash.
const CASCADE_TAKEOVER_WAIT_MS: u64 = 6_000;

impl Driver<'_> {
    pub(super) fn begin(&mut self, e: &Episode) -> Active {
        let (a, b) = self.targets(&e.fault);
        self.start(e, a, b);
        let what = self.describe(&e.fault, a, b);
        let now = self.now();
        self.history
            .borrow_mut()
            .event_at(now, format!("fault {what} for {}ms", e.duration_ms));
        let cascade = match e.fault {
            Fault::Cascade { partition, .. } => Some(CascadeState {
                epoch: self
                    .observer
                    .partition_leader(crate::history::TOPIC, partition)
                    .map_or(-1, |(epoch, _)| epoch),
                next: None,
                crashed: None,
                hold_ms: e.duration_ms,
                span: None,
            }),
            _ => None,
        };
        let wait_ms = match e.fault {
            Fault::Cascade { .. } => CASCADE_TAKEOVER_WAIT_MS,
            _ => 0,
        };
        let touched = self.touched(&e.fault, a, b);
        let span = self.observer.health.open(touched, now, what);
        Active {
            span,
            end_ms: self.now() + wait_ms + e.duration_ms,
            fault: e.fault.clone(),
            a,
            b,
            cascade,
        }
    }

    /// The nodes a fault targets, resolved against what the driver saw (the leader, a
    /// partition's leader); `b` is `a` for faults of one node.
    fn targets(&mut self, fault: &Fault) -> (usize, usize) {
        let a = match *fault {
            Fault::Crash { node }
            | Fault::Isolate { node }
            | Fault::Pause { node }
            | Fault::PowerLoss { node, .. }
            | Fault::DiskFull { node, .. }
            | Fault::SyncFails { node }
            | Fault::SlowDisk { node, .. }
            | Fault::ClockJump { node, .. } => self.observer.resolve(node),
            Fault::Outage { .. } => 0,
            Fault::OneWay { from, .. } => self.observer.resolve(from),
            Fault::Delay { a, .. } => self.observer.resolve(a),
            Fault::Split { ref side, .. } => side.first().copied().unwrap_or(0),
            Fault::Bridge { ref left, .. } => left.first().copied().unwrap_or(0),
            Fault::Cascade { partition, .. } => self
                .observer
                .partition_leader(crate::history::TOPIC, partition)
                .map_or(0, |(_, leader)| leader),
        };
        let b = match *fault {
            Fault::OneWay { to, .. } => self.observer.resolve(to),
            Fault::Delay { b, .. } => self.observer.resolve(b),
            _ => a,
        };
        (a, b)
    }

    /// Applies the fault to its targets.
    fn start(&mut self, e: &Episode, a: usize, b: usize) {
        let (ha, hb) = (host_name(a), host_name(b));
        match e.fault {
            Fault::Crash { .. } => self.take_down(a),
            Fault::Isolate { .. } => {
                for o in self.others(a) {
                    self.cut_link(&ha, &o, true);
                }
            }
            Fault::OneWay { .. } if a != b => {
                let ops = self.links.cut_one_way(&ha, &hb);
                self.apply(ops);
            }
            Fault::Pause { .. } => self.pause(a, true),
            Fault::Delay { .. } if a != b => self.hold_link(&ha, &hb, true),
            Fault::PowerLoss { torn_seed, .. } => {
                self.down[a] += 1;
                self.arm_power_cut(a, torn_seed, e);
            }
            Fault::Outage { torn_seed } => {
                for n in 0..self.scenario.nodes {
                    self.down[n] += 1;
                    self.arm_power_cut(n, torn_seed ^ n as u64, e);
                }
            }
            Fault::DiskFull { room, .. } => {
                if let Some(d) = self.disks[a].as_ref() {
                    d.set_write_budget(Some(room));
                }
                self.disk_faults[a] += 1;
                self.registry.borrow_mut().disk_failing[a] = true;
            }
            Fault::SyncFails { .. } => {
                if let Some(d) = self.disks[a].as_ref() {
                    d.set_fail_sync(true);
                }
                self.disk_faults[a] += 1;
                self.registry.borrow_mut().disk_failing[a] = true;
            }
            Fault::SlowDisk { sync_ms, .. } => {
                self.slow_syncs[a].push(sync_ms);
                self.set_sync_delay(a);
            }
            Fault::ClockJump { by_ms, .. } => {
                self.clock_skews[a].fetch_add(by_ms, Ordering::SeqCst);
            }
            Fault::Cascade { .. } => self.take_down(a),
            Fault::Split {
                ref side,
                client_cut,
            } => self.split(side, client_cut, true),
            Fault::Bridge {
                ref left,
                ref right,
            } => self.cut_between(left, right, true),
            _ => {}
        }
    }

    /// The nodes a fault may keep from heartbeating the controller, whichever node that is:
    /// a crashed node; both ends of a cut or held link (an isolation or a pause touches every
    /// link of its node, so every node); the sides of a bridge; every node for a split, an
    /// outage, and disk and clock faults (the controller's own may stall or skew sessions).
    fn touched(&self, fault: &Fault, a: usize, b: usize) -> Vec<usize> {
        match fault {
            Fault::Crash { .. } | Fault::PowerLoss { .. } | Fault::Cascade { .. } => vec![a],
            Fault::OneWay { .. } | Fault::Delay { .. } => vec![a, b],
            Fault::Bridge { left, right } => left.iter().chain(right).copied().collect(),
            Fault::Isolate { .. }
            | Fault::Pause { .. }
            | Fault::Outage { .. }
            | Fault::Split { .. }
            | Fault::DiskFull { .. }
            | Fault::SyncFails { .. }
            | Fault::SlowDisk { .. }
            | Fault::ClockJump { .. } => (0..self.scenario.nodes).collect(),
        }
    }

    /// What a fault does, in the trace's words.
    fn describe(&self, fault: &Fault, a: usize, b: usize) -> String {
        match *fault {
            Fault::Crash { .. } => format!("crash n{a}"),
            Fault::Isolate { .. } => format!("isolate n{a}"),
            Fault::OneWay { .. } => format!("drop n{a}->n{b}"),
            Fault::Pause { .. } => format!("pause n{a}"),
            Fault::Delay { .. } => format!("hold n{a}<->n{b}"),
            Fault::PowerLoss { .. } => format!("power loss n{a}"),
            Fault::Outage { .. } => "outage of every node".to_string(),
            Fault::DiskFull { room, .. } => format!("disk of n{a} full after {room} more bytes"),
            Fault::SyncFails { .. } => format!("every fsync of n{a} fails"),
            Fault::SlowDisk { sync_ms, .. } => format!("every fsync of n{a} takes {sync_ms}ms"),
            Fault::ClockJump { by_ms, .. } => format!("clock of n{a} jumps {by_ms:+}ms"),
            Fault::Split {
                ref side,
                client_cut,
            } => format!(
                "split {side:?} from the other nodes{}",
                if client_cut { " and the clients" } else { "" }
            ),
            Fault::Bridge {
                ref left,
                ref right,
            } => format!(
                "cut {left:?} from {right:?}, {:?} reaching both",
                (0..self.scenario.nodes)
                    .filter(|n| !left.contains(n) && !right.contains(n))
                    .collect::<Vec<_>>()
            ),
            Fault::Cascade {
                partition,
                delay_ms,
            } => format!(
                "crash n{a}, leader of {}-{partition}, then its successor {delay_ms}ms after it takes over",
                crate::history::TOPIC
            ),
        }
    }

    /// Cuts (or repairs) every link between `side` and the other nodes, and the clients' links
    /// to `side` with `client_cut`.
    fn split(&mut self, side: &[usize], client_cut: bool, cut: bool) {
        let others: Vec<usize> = (0..self.scenario.nodes)
            .filter(|n| !side.contains(n))
            .collect();
        self.cut_between(side, &others, cut);
        if client_cut {
            for &a in side {
                self.cut_link(&host_name(a), "client", cut);
            }
        }
    }

    /// Cuts (or repairs) every link between a node of `left` and a node of `right`, both ways.
    fn cut_between(&mut self, left: &[usize], right: &[usize], cut: bool) {
        for &a in left {
            for &b in right {
                self.cut_link(&host_name(a), &host_name(b), cut);
            }
        }
    }

    fn cut_link(&mut self, a: &str, b: &str, cut: bool) {
        let ops = if cut {
            self.links.cut(a, b)
        } else {
            self.links.repair(a, b)
        };
        self.apply_link(a, b, cut, ops);
    }

    fn hold_link(&mut self, a: &str, b: &str, hold: bool) {
        let ops = if hold {
            self.links.hold(a, b)
        } else {
            self.links.release(a, b)
        };
        self.apply_link(a, b, hold, ops);
    }

    /// Applies what a fault's claim on the link of `a` and `b` changed; a heal that changes
    /// nothing is traced (another fault under way still cuts or holds the link).
    fn apply_link(&mut self, a: &str, b: &str, claimed: bool, ops: Vec<LinkOp>) {
        if !claimed && ops.is_empty() {
            let now = self.now();
            self.history.borrow_mut().event_at(
                now,
                format!("link {a}-{b} still cut or held by another fault"),
            );
        }
        self.apply(ops);
    }

    /// Holds (or releases) every link of node `n`, to the clients too: a paused process as
    /// its peers see it.
    fn pause(&mut self, n: usize, hold: bool) {
        let h = host_name(n);
        for o in self.others(n) {
            self.hold_link(&h, &o, hold);
        }
        self.hold_link(&h, "client", hold);
    }

    /// Tells turmoil what the link table decided.
    fn apply(&mut self, ops: Vec<LinkOp>) {
        for op in ops {
            match op {
                LinkOp::Hold(a, b) => self.sim.hold(a.as_str(), b.as_str()),
                LinkOp::Release(a, b) => self.sim.release(a.as_str(), b.as_str()),
                LinkOp::CutOneWay { from, to } => {
                    self.sim.partition_oneway(from.as_str(), to.as_str())
                }
                LinkOp::RepairOneWay { from, to } => {
                    self.sim.repair_oneway(from.as_str(), to.as_str())
                }
            }
        }
    }

    /// One more fault wants node `n` down: its process dies now (its files stay).
    fn take_down(&mut self, n: usize) {
        self.down[n] += 1;
        self.sim.crash(host_name(n).as_str());
        self.registry.borrow_mut().forget(n);
    }

    /// A fault that wanted node `n` down ends; the node boots when no other fault still
    /// wants it down (overlapping episodes).
    fn bring_up(&mut self, n: usize) {
        self.down[n] = self.down[n].saturating_sub(1);
        self.boot_if_free(n);
    }

    fn boot_if_free(&mut self, n: usize) {
        if self.down[n] == 0 {
            self.sim.bounce(host_name(n).as_str());
        } else {
            let now = self.now();
            self.history
                .borrow_mut()
                .event_at(now, format!("n{n} stays down: another fault under way"));
        }
    }

    /// Node `n`'s fsyncs take as long as the slowest of its slow-disk episodes under way
    /// (background episodes may overlap).
    fn set_sync_delay(&self, n: usize) {
        let ms = self.slow_syncs[n].iter().copied().max().unwrap_or(0);
        if let Some(d) = self.disks[n].as_ref() {
            d.set_simulated_sync_delay(Duration::from_millis(ms));
        }
    }

    /// A cascading crash under way: once a new leader of the partition shows in any node's
    /// metadata, crash it `delay_ms` later.
    pub(super) fn cascade_step(&mut self, f: &mut Active) {
        let Fault::Cascade {
            partition,
            delay_ms,
        } = f.fault
        else {
            return;
        };
        let now = self.now();
        let Some(c) = f.cascade.as_mut() else { return };
        if c.crashed.is_some() {
            return;
        }
        match c.next {
            None => {
                let Some((epoch, leader)) = self
                    .observer
                    .partition_leader(crate::history::TOPIC, partition)
                else {
                    return;
                };
                if epoch > c.epoch && leader != f.a {
                    c.next = Some((leader, now + delay_ms));
                    self.history.borrow_mut().event_at(
                        now,
                        format!("n{leader} leads {}-{partition} at epoch {epoch}; it crashes in {delay_ms}ms", crate::history::TOPIC),
                    );
                }
            }
            Some((n, due)) if now >= due => {
                self.take_down(n);
                c.crashed = Some(n);
                c.span = Some(
                    self.observer
                        .health
                        .open(vec![n], now, format!("crash n{n}")),
                );
                f.end_ms = now + c.hold_ms;
                self.history
                    .borrow_mut()
                    .event_at(now, format!("crash n{n}"));
            }
            Some(_) => {}
        }
    }

    pub(super) fn heal(&mut self, f: &Active) {
        let now = self.now();
        self.observer.health.close(f.span, now);
        if let Some(s) = f.cascade.as_ref().and_then(|c| c.span) {
            self.observer.health.close(s, now);
        }
        let (ha, hb) = (host_name(f.a), host_name(f.b));
        match f.fault {
            Fault::Crash { .. } => {
                if self.bug == Some(PlantedBug::ForgetVote) && self.down[f.a] == 1 {
                    let vote = gregor_quorum::encode(&gregor_quorum::Vote::default())
                        .expect("a vote encodes");
                    // The planted bug writes the file without the quorum's atomic replace.
                    let _ = std::fs::write(self.dirs[f.a].join("quorum-state"), vote);
                }
                self.bring_up(f.a);
            }
            Fault::PowerLoss { .. } => {
                self.cut_power(Some(f.a));
                self.bring_up(f.a);
            }
            Fault::Outage { .. } => {
                self.cut_power(None);
                for n in 0..self.scenario.nodes {
                    self.bring_up(n);
                }
            }
            Fault::DiskFull { .. } | Fault::SyncFails { .. } => {
                self.disk_faults[f.a] = self.disk_faults[f.a].saturating_sub(1);
                if self.disk_faults[f.a] == 0 {
                    if let Some(d) = self.disks[f.a].as_ref() {
                        d.set_write_budget(None);
                        d.set_fail_sync(false);
                    }
                    self.registry.borrow_mut().disk_failing[f.a] = false;
                    // The operator restarts the node on the repaired disk, which keeps only
                    // what was synced (once no other fault holds it down).
                    self.power_loss(f.a, 0);
                    self.boot_if_free(f.a);
                }
            }
            Fault::Isolate { .. } => {
                for o in self.others(f.a) {
                    self.cut_link(&ha, &o, false);
                }
            }
            Fault::OneWay { .. } if f.a != f.b => {
                let ops = self.links.repair_one_way(&ha, &hb);
                self.apply_link(&ha, &hb, false, ops);
            }
            Fault::Pause { .. } => self.pause(f.a, false),
            Fault::Delay { .. } if f.a != f.b => self.hold_link(&ha, &hb, false),
            Fault::SlowDisk { sync_ms, .. } => {
                let slow = &mut self.slow_syncs[f.a];
                if let Some(i) = slow.iter().position(|&ms| ms == sync_ms) {
                    slow.remove(i);
                }
                self.set_sync_delay(f.a);
            }
            Fault::ClockJump { by_ms, .. } => {
                self.clock_skews[f.a].fetch_sub(by_ms, Ordering::SeqCst);
            }
            Fault::Split {
                ref side,
                client_cut,
            } => self.split(side, client_cut, false),
            Fault::Bridge {
                ref left,
                ref right,
            } => self.cut_between(left, right, false),
            Fault::Cascade { .. } => {
                self.bring_up(f.a);
                if let Some(n) = f.cascade.as_ref().and_then(|c| c.crashed) {
                    self.bring_up(n);
                }
            }
            _ => {}
        }
        let now = self.now();
        let what = match f.fault {
            Fault::SlowDisk { .. } => format!("fsyncs of n{} fast again", f.a),
            Fault::ClockJump { .. } => format!("clock of n{} stepped back to the right time", f.a),
            _ => format!("healed: {}", self.describe(&f.fault, f.a, f.b)),
        };
        self.history.borrow_mut().event_at(now, what);
    }

    /// The power to node `n` fails after a seed-drawn number (0-31) of further disk
    /// operations, so the cut can fall between a write and its sync, or mid-way through a
    /// rename; the node's operations fail with EIO from then until the driver stops it after
    /// the step (see [`Driver::cut_power_where_due`]), or half-way through the episode if it
    /// touched its disk less often than that.
    fn arm_power_cut(&mut self, n: usize, torn_seed: u64, e: &Episode) {
        let Some(disk) = self.disks.get(n).cloned().flatten() else {
            return;
        };
        let ops = gregor_meta::SplitMix64::new(torn_seed).next_below(32) as u64;
        disk.crash_after(Some(ops));
        let now = self.now();
        self.pending_cuts.push(PendingCut {
            node: n,
            deadline_ms: now + e.duration_ms / 2,
            torn_seed,
        });
        self.history.borrow_mut().event_at(
            now,
            format!("n{n} loses power after {ops} more disk operations"),
        );
    }

    /// Stops the nodes whose power cut happened (their disk refused an operation) or is due.
    pub(super) fn cut_power_where_due(&mut self) {
        if self.pending_cuts.is_empty() {
            return;
        }
        let now = self.now();
        let disks = self.disks.clone();
        self.cut_power_where(|c| {
            now >= c.deadline_ms || disks[c.node].as_ref().is_some_and(|d| d.is_dead())
        });
    }

    /// Cuts the power now of node `only` (or of every node) where it is still pending.
    fn cut_power(&mut self, only: Option<usize>) {
        self.cut_power_where(|c| only.is_none_or(|n| n == c.node));
    }

    /// Carries out the pending cuts `due` picks; the others stay pending.
    fn cut_power_where(&mut self, due: impl Fn(&PendingCut) -> bool) {
        let (now, later): (Vec<PendingCut>, Vec<PendingCut>) =
            std::mem::take(&mut self.pending_cuts)
                .into_iter()
                .partition(due);
        self.pending_cuts = later;
        for c in now {
            self.power_loss(c.node, c.torn_seed);
        }
    }

    /// Node `n` loses power: its process dies with the host, then its disk drops what was not
    /// synced (before anything can open its files again).
    pub(super) fn power_loss(&mut self, n: usize, torn_seed: u64) {
        self.sim.crash(host_name(n).as_str());
        self.registry.borrow_mut().forget(n);
        let Some(disk) = self.disks.get(n).cloned().flatten() else {
            return;
        };
        self.power_cuts += 1;
        let now = self.now();
        let line = match disk.power_loss(Some(torn_seed)) {
            Ok(r) => {
                let torn = r.torn.map_or(String::new(), |t| {
                    let root = self.dirs[n].parent().unwrap_or(&self.dirs[n]);
                    let name = t.path.strip_prefix(root).unwrap_or(&t.path).display();
                    format!(
                        ", torn write kept {} of {} bytes at {name}@{}",
                        t.kept, t.len, t.pos
                    )
                });
                format!(
                    "n{n} lost power: {} unsynced writes dropped{torn}",
                    r.unsynced_writes_dropped
                )
            }
            Err(e) => {
                let v = Violation::new(
                    Property::NodeFailedToStart,
                    format!("n{n}: its disk could not be restored after the power loss: {e}"),
                );
                self.observer.violations.push(v);
                format!("n{n} lost power; restoring its disk failed: {e}")
            }
        };
        self.history.borrow_mut().event_at(now, line);
    }
}
