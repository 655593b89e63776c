//! What `gregor cluster up` does when a node exits or a restart is asked for: the decisions
//! only (which node to start, which to signal, what to tell the operator); the shell in
//! `cluster_cmd` runs the processes.

/// One node as the supervisor sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    Running,
    /// Told to stop (SIGTERM) so that it can be started again once it has exited.
    Restarting,
    /// Exited by itself (or was killed) and not started again yet.
    Down,
}

/// What the shell does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Start node i's process (and answer whoever asked for its restart).
    Start(u16),
    /// Send node i SIGTERM: a clean, controlled shutdown.
    Terminate(u16),
    /// A line for the operator.
    Say(String),
}

#[derive(Debug)]
pub struct Supervisor {
    nodes: Vec<NodeState>,
    /// The cluster's data directory, for the restart hint.
    data_dir: String,
}

impl Supervisor {
    /// `n` nodes, all running, with their data under `data_dir`.
    pub fn new(n: u16, data_dir: &str) -> Self {
        Self {
            nodes: vec![NodeState::Running; usize::from(n)],
            data_dir: data_dir.to_string(),
        }
    }

    #[cfg(test)]
    pub fn state(&self, i: u16) -> Option<NodeState> {
        self.nodes.get(usize::from(i)).copied()
    }

    /// Node `i`'s process exited with `status`. The other nodes keep running: a cluster of
    /// three serves on with one node away, which is what one tries such a cluster for.
    pub fn exited(&mut self, i: u16, status: &str) -> Vec<Effect> {
        let Some(state) = self.nodes.get_mut(usize::from(i)) else {
            return Vec::new();
        };
        match *state {
            NodeState::Restarting => vec![Effect::Start(i)],
            NodeState::Running => {
                *state = NodeState::Down;
                vec![Effect::Say(format!(
                    "node {i} exited ({status}); the other nodes keep running \
                     (`gregor cluster restart-node {i} --data-dir {}` starts it again)",
                    self.data_dir
                ))]
            }
            NodeState::Down => Vec::new(),
        }
    }

    /// A restart of node `i` was asked for: a node that is down starts now, a running one is
    /// stopped cleanly first and started once it has exited.
    pub fn restart(&mut self, i: u16) -> Result<Vec<Effect>, String> {
        let n = self.nodes.len();
        let Some(state) = self.nodes.get_mut(usize::from(i)) else {
            return Err(format!(
                "no node {i}: the cluster has nodes 0..{}",
                n.saturating_sub(1)
            ));
        };
        match *state {
            NodeState::Down => Ok(vec![Effect::Start(i)]),
            NodeState::Running => {
                *state = NodeState::Restarting;
                Ok(vec![
                    Effect::Say(format!("restarting node {i}: stopping it first")),
                    Effect::Terminate(i),
                ])
            }
            NodeState::Restarting => Err(format!("node {i} is already restarting")),
        }
    }

    /// Node `i`'s process was started (`Ok`) or could not be (`Err`, it stays down).
    pub fn started(&mut self, i: u16, outcome: Result<u32, String>) -> Vec<Effect> {
        let Some(state) = self.nodes.get_mut(usize::from(i)) else {
            return Vec::new();
        };
        match outcome {
            Ok(pid) => {
                *state = NodeState::Running;
                vec![Effect::Say(format!("node {i} started again (pid {pid})"))]
            }
            Err(e) => {
                *state = NodeState::Down;
                vec![Effect::Say(format!("node {i} could not be started: {e}"))]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_that_exits_leaves_the_others_running() {
        let mut s = Supervisor::new(3, "d");
        let effects = s.exited(1, "signal: 9 (SIGKILL)");
        assert!(matches!(effects.as_slice(), [Effect::Say(m)]
            if m.contains("node 1 exited") && m.contains("restart-node 1 --data-dir d")));
        assert_eq!(s.state(0), Some(NodeState::Running));
        assert_eq!(s.state(1), Some(NodeState::Down));
        assert_eq!(s.state(2), Some(NodeState::Running));
    }

    #[test]
    fn a_down_node_is_started_on_request() {
        let mut s = Supervisor::new(3, "d");
        s.exited(2, "exit status: 1");
        assert_eq!(s.restart(2), Ok(vec![Effect::Start(2)]));
        s.started(2, Ok(42));
        assert_eq!(s.state(2), Some(NodeState::Running));
    }

    #[test]
    fn a_running_node_is_stopped_then_started_once_it_has_exited() {
        let mut s = Supervisor::new(3, "d");
        let effects = s.restart(0).expect("restart accepted");
        assert_eq!(effects.last(), Some(&Effect::Terminate(0)));
        assert_eq!(
            s.restart(0),
            Err("node 0 is already restarting".to_string())
        );
        assert_eq!(s.exited(0, "exit status: 0"), vec![Effect::Start(0)]);
        s.started(0, Ok(7));
        assert_eq!(s.state(0), Some(NodeState::Running));
    }

    #[test]
    fn a_failed_start_leaves_the_node_down_and_restartable() {
        let mut s = Supervisor::new(2, "d");
        s.exited(1, "exit status: 1");
        s.restart(1).expect("accepted");
        let effects = s.started(1, Err("no such file".into()));
        assert!(
            matches!(effects.as_slice(), [Effect::Say(m)] if m.contains("could not be started"))
        );
        assert_eq!(s.state(1), Some(NodeState::Down));
        assert_eq!(s.restart(1), Ok(vec![Effect::Start(1)]));
    }

    #[test]
    fn unknown_nodes_are_refused() {
        let mut s = Supervisor::new(3, "d");
        assert_eq!(
            s.restart(3),
            Err("no node 3: the cluster has nodes 0..2".to_string())
        );
        assert!(s.exited(9, "exit status: 0").is_empty());
    }
}
