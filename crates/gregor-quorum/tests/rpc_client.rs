//! The controller RPC client over real TCP: a call its caller stopped waiting for must not
//! leave its response to answer the next call (forwarding drops an attempt when the active
//! controller changes, then sends the next request on the same client).

use std::time::Duration;

use gregor_quorum::rpc::{
    read_frame, write_frame, KafkaReply, RpcClient, RpcRequest, RpcResponse, TcpConnector,
};

fn kafka(api_key: i16) -> RpcRequest {
    RpcRequest::Kafka {
        api_key,
        api_version: 0,
        body: Vec::new(),
    }
}

/// A peer that answers each request after `delay`, naming the request's API key in the reply.
async fn slow_peer(delay: Duration) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                while let Ok(Some(req)) = read_frame::<_, RpcRequest>(&mut s).await {
                    let RpcRequest::Kafka { api_key, .. } = req else {
                        return;
                    };
                    tokio::time::sleep(delay).await;
                    let reply = RpcResponse::Kafka(Ok(KafkaReply {
                        body: Vec::new(),
                        applied_index: api_key as u64,
                    }));
                    if write_frame(&mut s, &reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn applied(r: RpcResponse) -> u64 {
    match r {
        RpcResponse::Kafka(Ok(reply)) => reply.applied_index,
        other => panic!("unexpected response {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_abandoned_mid_way_does_not_answer_the_next_one() {
    let addr = slow_peer(Duration::from_millis(300)).await;
    let mut client = RpcClient::new(TcpConnector, addr);
    // Warm the connection up: a completed call keeps it.
    assert_eq!(
        applied(
            client
                .call(&kafka(7), Duration::from_secs(5))
                .await
                .unwrap()
        ),
        7
    );
    // The caller stops waiting once the request is on the wire (the future is dropped).
    let abandoned = kafka(1);
    tokio::select! {
        _ = client.call(&abandoned, Duration::from_secs(5)) => panic!("answered too soon"),
        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
    }
    // The next call gets its own answer, not the abandoned one's.
    let r = client
        .call(&kafka(2), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(applied(r), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_timed_out_does_not_answer_the_next_one() {
    let addr = slow_peer(Duration::from_millis(300)).await;
    let mut client = RpcClient::new(TcpConnector, addr);
    let err = client
        .call(&kafka(1), Duration::from_millis(100))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    let r = client
        .call(&kafka(2), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(applied(r), 2);
}

/// A peer that answers every Vote, counting the connections it accepted; `close_idle` drops
/// each connection after one answer (a peer that restarts between messages).
async fn counting_voter(
    close_idle: bool,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                while let Ok(Some(RpcRequest::Vote(req))) = read_frame(&mut s).await {
                    let reply = RpcResponse::Vote(Ok(openraft::raft::VoteResponse::new(
                        req.vote, None, true,
                    )));
                    if write_frame(&mut s, &reply).await.is_err() || close_idle {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

async fn vote_through_new_clients(addr: &str, calls: usize) {
    use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
    let mut network = gregor_quorum::rpc::Network::new(TcpConnector);
    let node = openraft::BasicNode::new(addr);
    for _ in 0..calls {
        // openraft makes a new client for every leadership check and election.
        let mut client = network.new_client(1, &node).await;
        let request = openraft::raft::VoteRequest::new(openraft::Vote::new(1, 2), None);
        let option = RPCOption::new(Duration::from_secs(5));
        let response = client.vote(request, option).await.unwrap();
        assert!(response.vote_granted);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_messages_to_a_peer_reuse_one_connection() {
    let (addr, accepted) = counting_voter(false).await;
    vote_through_new_clients(&addr, 50).await;
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_the_peer_closed_is_replaced_without_failing_the_message() {
    let (addr, accepted) = counting_voter(true).await;
    vote_through_new_clients(&addr, 10).await;
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 10);
}
