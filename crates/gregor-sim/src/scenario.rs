//! What one seed decides: cluster size, timing settings, network latency, and the fault
//! schedule. Everything is drawn from the seed with gregor-meta's SplitMix64, so a seed means the
//! same scenario on any machine.

use gregor_meta::SplitMix64;

/// One fault episode; every episode ends healed. The schedule's own episodes follow one
/// another; background ones (slow disks, clock jumps, `--overlaps`) overlap them and each
/// other, and the driver counts each fault's claim on a link or a node (`links.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The node's process dies (its files stay) and restarts after the episode.
    Crash { node: Target },
    /// The node is cut off from the other nodes in both directions (the workload still reaches
    /// it, as a broker on its side would).
    Isolate { node: Target },
    /// Messages from `from` to `to` are dropped; the other direction works.
    OneWay { from: Target, to: Target },
    /// Every link of the node holds its messages until the episode ends, then delivers them: a
    /// paused process as its peers see it (its own timers keep running).
    Pause { node: Target },
    /// One link holds its messages (a long delay), then delivers them.
    Delay { a: Target, b: Target },
    /// The node loses power (`--power-loss` runs): its process dies, every byte and directory
    /// entry it had not synced is gone (a seed-drawn prefix of its last unsynced write may
    /// survive, torn), and it boots again after the episode.
    PowerLoss { node: Target, torn_seed: u64 },
    /// Every node loses power at once, as in a data-centre outage (`--power-loss` runs).
    Outage { torn_seed: u64 },
    /// The node's disk fills up (`--disk-faults` runs): `room` more bytes can be written, then
    /// every write fails with ENOSPC (the one that crosses the limit writes what fits). When
    /// the episode ends the operator frees space and restarts the node; what it had not synced
    /// is gone.
    DiskFull { node: Target, room: u64 },
    /// Every fsync of the node fails with EIO (`--disk-faults` runs). When the episode ends the
    /// disk works again and the node is restarted; what no sync made durable is gone (as on
    /// Linux, where a failed fsync may drop the dirty pages it could not write).
    SyncFails { node: Target },
    /// Every fsync of the node (its partition logs, its metadata log, its small files) takes
    /// `sync_ms` of simulated time (`--slow-disk` runs): a disk that is slow, not broken.
    SlowDisk { node: Target, sync_ms: u64 },
    /// The node's wall clock jumps by `by_ms` (forward or back), as an operator or a bad NTP
    /// server steps it (`--clock-jumps` runs); when the episode ends it is stepped back to the
    /// right time, a second jump the other way. Its monotonic timers are not affected.
    ClockJump { node: Target, by_ms: i64 },
    /// Two leaders of one data partition crash one after the other (`--cascading-crashes`
    /// runs): its current leader, then, `delay_ms` after a new leader takes over (in any
    /// node's metadata), that one too, before the remaining follower has fetched from it.
    /// Both restart when the episode ends. With RF 3 and `min.insync.replicas=2` the last
    /// in-sync replica must hold every acknowledged record.
    Cascade { partition: i32, delay_ms: u64 },
    /// The cluster splits in two (`--splits` runs): the nodes in `side` reach one another but
    /// none of the others, both ways (on five nodes two against three, so the quorum may sit on
    /// either side; on three nodes one against two). With `client_cut`, the clients reach only
    /// the other side too.
    Split { side: Vec<usize>, client_cut: bool },
    /// A partition that is not transitive (`--bridges` runs): no node in `left` reaches any in
    /// `right`, both ways, while the other nodes (the bridges) reach every node and the clients
    /// reach everyone. Each side can hear of the other only through a bridge: a Raft leader on
    /// one side loses the followers on the other but keeps its majority through the bridge,
    /// and the followers cut off from it start elections the bridge may grant.
    Bridge { left: Vec<usize>, right: Vec<usize> },
}

/// A node chosen by index, or whichever node leads when the episode starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Node(usize),
    Leader,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Episode {
    pub start_ms: u64,
    pub duration_ms: u64,
    pub fault: Fault,
}

/// Everything the seed fixes before the run.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub seed: u64,
    pub nodes: usize,
    /// Per node and restart: the pinned election timeout (ms). Distinct across nodes.
    pub election_timeout_ms: Vec<u64>,
    pub heartbeat_interval_ms: u64,
    pub snapshot_bytes: u64,
    pub max_latency_ms: u64,
    pub episodes: Vec<Episode>,
    /// Episodes that may overlap the others and each other (slow disks, clock jumps): they
    /// change how a node runs, not what the network or the disk lets through.
    pub background: Vec<Episode>,
    /// When the last episode has ended and every fault is healed.
    pub faults_end_ms: u64,
}

/// Simulated time before the first fault: the quorum forms and brokers register.
pub const WARMUP_MS: u64 = 1_500;

impl Scenario {
    pub fn from_seed(seed: u64) -> Scenario {
        let mut rng = SplitMix64::new(seed ^ 0x5eed_5eed_5eed_5eed);
        let nodes = if rng.next_below(4) == 0 { 5 } else { 3 };
        let heartbeat_interval_ms = 50;
        // Distinct timeouts 20 ms apart at least, so that no two nodes time out together
        // forever; shuffled by the seed.
        let mut slots: Vec<u64> = (0..8).collect();
        for i in (1..slots.len()).rev() {
            let j = rng.next_below(i + 1);
            slots.swap(i, j);
        }
        let election_timeout_ms = (0..nodes)
            .map(|i| 150 + slots[i] * 20 + rng.next_below(10) as u64)
            .collect();
        let snapshot_bytes = if rng.next_below(2) == 0 {
            4096
        } else {
            1 << 20
        };
        let max_latency_ms = 1 + rng.next_below(20) as u64;
        let mut episodes = Vec::new();
        let mut t = WARMUP_MS;
        let count = 2 + rng.next_below(4);
        for _ in 0..count {
            t += rng.next_below(800) as u64;
            let duration_ms = 200 + rng.next_below(2_500) as u64;
            let kind = rng.next_below(6);
            let fault = draw_fault(&mut rng, nodes, kind);
            episodes.push(Episode {
                start_ms: t,
                duration_ms,
                fault,
            });
            t += duration_ms;
        }
        Scenario {
            seed,
            nodes,
            election_timeout_ms,
            heartbeat_interval_ms,
            snapshot_bytes,
            max_latency_ms,
            episodes,
            background: Vec::new(),
            faults_end_ms: t,
        }
    }

    /// Background episodes drawn from a stream of their own (`salt`), so the rest of the
    /// scenario is the one the seed gives without them: one to three, each on one node (the
    /// leader or a random one), starting anywhere between the warm-up and the end of the
    /// other faults and lasting 0.5-4 s.
    fn with_background(
        mut self,
        salt: u64,
        fault: impl Fn(&mut SplitMix64, Target) -> Fault,
    ) -> Scenario {
        let mut rng = SplitMix64::new(self.seed ^ salt);
        let span = self.faults_end_ms.saturating_sub(WARMUP_MS).max(1);
        for _ in 0..1 + rng.next_below(3) {
            let start_ms = WARMUP_MS + rng.next_below(span as usize) as u64;
            let duration_ms = 500 + rng.next_below(3_500) as u64;
            let node = draw_target(&mut rng, self.nodes);
            let fault = fault(&mut rng, node);
            self.push_background(start_ms, duration_ms, fault);
        }
        self.background.sort_by_key(|e| e.start_ms);
        self
    }

    /// Adds an episode that may overlap the others; the faults end no sooner than it does.
    fn push_background(&mut self, start_ms: u64, duration_ms: u64, fault: Fault) {
        self.background.push(Episode {
            start_ms,
            duration_ms,
            fault,
        });
        self.faults_end_ms = self.faults_end_ms.max(start_ms + duration_ms);
    }

    /// The same scenario with slow disks (`--slow-disk`): every fsync of one node takes
    /// 2-40 ms (a busy disk) or 100-1500 ms (a failing one, or a cloud volume at its limit)
    /// of simulated time for the episode.
    pub fn with_slow_disks(self) -> Scenario {
        self.with_background(0x5105_d15c_5105_d15c, |rng, node| Fault::SlowDisk {
            node,
            sync_ms: if rng.next_below(2) == 0 {
                2 + rng.next_below(39) as u64
            } else {
                100 + rng.next_below(1_401) as u64
            },
        })
    }

    /// The same scenario with clock jumps (`--clock-jumps`): one node's wall clock is off by
    /// 0.2-8 s, ahead or behind, for the episode.
    pub fn with_clock_jumps(self) -> Scenario {
        self.with_background(0xc10c_c10c_c10c_c10c, |rng, node| {
            let by_ms = 200 + rng.next_below(7_801) as i64;
            Fault::ClockJump {
                node,
                by_ms: if rng.next_below(2) == 0 {
                    by_ms
                } else {
                    -by_ms
                },
            }
        })
    }

    /// The same scenario with disk faults (`--power-loss`): drawn from a stream of their own,
    /// so the rest of the scenario is the one the seed gives without them. Three crashes in
    /// four become power losses, and half the seeds end their schedule with an outage of the
    /// whole cluster.
    pub fn with_power_losses(mut self) -> Scenario {
        let mut rng = SplitMix64::new(self.seed ^ 0xd15c_d15c_d15c_d15c);
        for e in &mut self.episodes {
            if let Fault::Crash { node } = e.fault {
                if rng.next_below(4) != 0 {
                    e.fault = Fault::PowerLoss {
                        node,
                        torn_seed: rng.next_u64(),
                    };
                }
            }
        }
        if rng.next_below(2) == 0 {
            let start_ms = self.faults_end_ms + rng.next_below(800) as u64;
            let duration_ms = 200 + rng.next_below(1_500) as u64;
            self.episodes.push(Episode {
                start_ms,
                duration_ms,
                fault: Fault::Outage {
                    torn_seed: rng.next_u64(),
                },
            });
            self.faults_end_ms = start_ms + duration_ms;
        }
        self
    }

    /// Appends an episode after every other one; the faults end when it does (plus `wait_ms`
    /// it may take before its own duration starts).
    fn push_last(&mut self, start_ms: u64, duration_ms: u64, fault: Fault, wait_ms: u64) {
        self.episodes.push(Episode {
            start_ms,
            duration_ms,
            fault,
        });
        self.faults_end_ms = start_ms + wait_ms + duration_ms;
    }

    /// The same scenario with one or two disk-fault episodes after the others (`--disk-faults`):
    /// a full disk or failing fsyncs on one node. Drawn from a stream of their own, so the
    /// rest of the scenario is the one the seed gives without them.
    pub fn with_disk_faults(mut self) -> Scenario {
        let mut rng = SplitMix64::new(self.seed ^ 0xd15c_fa11_d15c_fa11);
        for _ in 0..1 + rng.next_below(2) {
            let start_ms = self.faults_end_ms + rng.next_below(800) as u64;
            let duration_ms = 300 + rng.next_below(2_200) as u64;
            let node = draw_target(&mut rng, self.nodes);
            let fault = if rng.next_below(2) == 0 {
                Fault::DiskFull {
                    node,
                    room: rng.next_below(2 << 10) as u64,
                }
            } else {
                Fault::SyncFails { node }
            };
            self.push_last(start_ms, duration_ms, fault, 0);
        }
        self
    }

    /// The same scenario with one or two cascading crashes (`--cascading-crashes`) after the
    /// other faults: a data partition's leader crashes, and its successor 0-60 ms after it
    /// takes over. Drawn from a stream of their own, so the rest of the scenario is the one
    /// the seed gives without them.
    pub fn with_cascading_crashes(mut self, partitions: i32) -> Scenario {
        let mut rng = SplitMix64::new(self.seed ^ 0xca5c_ade5_ca5c_ade5);
        for _ in 0..1 + rng.next_below(2) {
            let start_ms = self.faults_end_ms + 200 + rng.next_below(800) as u64;
            // How long both stay down after the second crash (the episode first waits, up to
            // 6 s, for the successor to take over).
            let duration_ms = 1_500 + rng.next_below(2_500) as u64;
            let fault = Fault::Cascade {
                partition: rng.next_below(partitions.max(1) as usize) as i32,
                delay_ms: rng.next_below(61) as u64,
            };
            self.push_last(start_ms, duration_ms, fault, 6_000);
        }
        self
    }

    /// The same scenario with one or two splits of the cluster in two (`--splits`) after the
    /// other faults, 0.5-3 s each. Drawn from a stream of their own.
    pub fn with_splits(mut self) -> Scenario {
        let mut rng = SplitMix64::new(self.seed ^ 0x5911_7511_5911_7511);
        for _ in 0..1 + rng.next_below(2) {
            let start_ms = self.faults_end_ms + rng.next_below(800) as u64;
            let duration_ms = 500 + rng.next_below(2_500) as u64;
            let nodes = self.shuffled_nodes(&mut rng);
            // The smaller side: one of three, or one or two of five.
            let size = 1 + rng.next_below(self.nodes.saturating_sub(1) / 2);
            let mut side: Vec<usize> = nodes[..size].to_vec();
            side.sort_unstable();
            let fault = Fault::Split {
                side,
                client_cut: rng.next_below(2) == 0,
            };
            self.push_last(start_ms, duration_ms, fault, 0);
        }
        self
    }

    /// The same scenario with one or two non-transitive partitions (`--bridges`) after the
    /// other faults, 0.5-3 s each: on three nodes one pair cannot talk while the third reaches
    /// both; on five, one or two nodes cannot reach one or two others while the rest reach
    /// everyone. Drawn from a stream of their own.
    pub fn with_bridges(mut self) -> Scenario {
        let mut rng = SplitMix64::new(self.seed ^ 0xb41d_9e5b_b41d_9e5b);
        for _ in 0..1 + rng.next_below(2) {
            let start_ms = self.faults_end_ms + rng.next_below(800) as u64;
            let duration_ms = 500 + rng.next_below(2_500) as u64;
            let nodes = self.shuffled_nodes(&mut rng);
            // At least one bridge: sides of one or two nodes each, leaving a node over.
            let most = (self.nodes.saturating_sub(1) / 2).max(1);
            let left_size = 1 + rng.next_below(most);
            let right_size = 1 + rng.next_below(most);
            let mut left: Vec<usize> = nodes[..left_size].to_vec();
            let mut right: Vec<usize> = nodes[left_size..left_size + right_size].to_vec();
            left.sort_unstable();
            right.sort_unstable();
            self.push_last(start_ms, duration_ms, Fault::Bridge { left, right }, 0);
        }
        self
    }

    /// The same scenario with one to three more episodes that overlap the others and each
    /// other (`--overlaps`), drawn from a stream of their own: crashes (power losses too, three
    /// in four, with `power_loss`), isolation, one-way partitions, pauses, held links, and full
    /// disks or failing fsyncs with `disk_faults`, each 0.2-2.7 s, starting anywhere between
    /// the warm-up and the end of the other faults. So a node may crash while it is cut off,
    /// a link be cut by two faults at once, or two nodes be down together.
    pub fn with_overlaps(mut self, power_loss: bool, disk_faults: bool) -> Scenario {
        let mut rng = SplitMix64::new(self.seed ^ 0x0e71_a9e5_0e71_a9e5);
        let span = self.faults_end_ms.saturating_sub(WARMUP_MS).max(1);
        for _ in 0..1 + rng.next_below(3) {
            let start_ms = WARMUP_MS + rng.next_below(span as usize) as u64;
            let duration_ms = 200 + rng.next_below(2_500) as u64;
            let kind = rng.next_below(if disk_faults { 8 } else { 6 });
            let fault = match kind {
                6 => Fault::DiskFull {
                    node: draw_target(&mut rng, self.nodes),
                    room: rng.next_below(2 << 10) as u64,
                },
                7 => Fault::SyncFails {
                    node: draw_target(&mut rng, self.nodes),
                },
                _ => match draw_fault(&mut rng, self.nodes, kind) {
                    Fault::Crash { node } if power_loss && rng.next_below(4) != 0 => {
                        Fault::PowerLoss {
                            node,
                            torn_seed: rng.next_u64(),
                        }
                    }
                    fault => fault,
                },
            };
            self.push_background(start_ms, duration_ms, fault);
        }
        self.background.sort_by_key(|e| e.start_ms);
        self
    }

    /// Every node's index, in an order drawn from `rng`.
    fn shuffled_nodes(&self, rng: &mut SplitMix64) -> Vec<usize> {
        let mut nodes: Vec<usize> = (0..self.nodes).collect();
        for i in (1..nodes.len()).rev() {
            let j = rng.next_below(i + 1);
            nodes.swap(i, j);
        }
        nodes
    }

    /// The pinned election timeout of a node in its `incarnation`-th run: each restart moves it
    /// by a seed-drawn amount, keeping nodes apart.
    pub fn election_timeout(&self, node: usize, incarnation: u64) -> u64 {
        let mut rng = SplitMix64::new(self.seed ^ (node as u64) << 32 ^ incarnation);
        self.election_timeout_ms[node] + rng.next_below(10) as u64
    }
}

/// A node to target: the leader when the episode starts, or a random one.
fn draw_target(rng: &mut SplitMix64, nodes: usize) -> Target {
    if rng.next_below(2) == 0 {
        Target::Leader
    } else {
        Target::Node(rng.next_below(nodes))
    }
}

/// One of the schedule's process and network faults, by `kind` (0-5): crash (twice as likely),
/// isolation, a one-way partition, a pause, a held link.
fn draw_fault(rng: &mut SplitMix64, nodes: usize, kind: usize) -> Fault {
    match kind {
        0 | 1 => Fault::Crash {
            node: draw_target(rng, nodes),
        },
        2 => Fault::Isolate {
            node: draw_target(rng, nodes),
        },
        3 => {
            let from = draw_target(rng, nodes);
            let mut to = Target::Node(rng.next_below(nodes));
            if to == from {
                to = Target::Node((rng.next_below(nodes - 1) + 1) % nodes);
            }
            Fault::OneWay { from, to }
        }
        4 => Fault::Pause {
            node: draw_target(rng, nodes),
        },
        _ => {
            let a = rng.next_below(nodes);
            let b = (a + 1 + rng.next_below(nodes - 1)) % nodes;
            Fault::Delay {
                a: Target::Node(a),
                b: Target::Node(b),
            }
        }
    }
}
