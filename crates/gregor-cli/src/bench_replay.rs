//! A replay of a broker's own Fetch answers from memory, for `gregor bench consume`: how fast
//! a consumer reads when its broker answers every Fetch instantly, with bytes already in hand.
//!
//! A loopback proxy between the consumer and one broker. While recording, it forwards every
//! request and keeps each Fetch answer under its request, decoded with its partitions in order
//! (librdkafka rotates the order from one Fetch to the next, and its first partition differs
//! between runs).
//! While replaying, a Fetch it has seen before is answered from memory with one `writev` and
//! nothing else: no broker, no log, no encoding. A Fetch it has not seen, whose partitions were
//! each answered at their offsets while recording (a consumer of many partitions asks for
//! different combinations each run), is answered with those partitions' recorded data, encoded
//! anew within the request's `max_bytes`. Any other Fetch is forwarded and counted. Metadata answers are rewritten to name the proxy, so the consumer's broker
//! connection also goes through it. Only a single-broker cluster can be proxied: the proxy has
//! one upstream, and a Metadata answer naming several brokers is refused.
//!
//! The figure such a consumer reaches is a ceiling no broker can pass on the same machine: what
//! is left is the consumer's own work and the loopback copy.

use std::collections::HashMap;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use anyhow::{bail, Context, Result};
use bytes::{Bytes, BytesMut};
use gregor_client::codec::MAX_RESPONSE_BYTES;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, MetadataResponse, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use uuid::Uuid;

/// What the proxy did since it was started (recording) or switched to replaying.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayCounts {
    /// Fetches answered from memory.
    pub fetches_replayed: u64,
    /// Fetches forwarded to the broker (all of them while recording; while replaying, the
    /// ones whose request had not been seen).
    pub fetches_forwarded: u64,
    /// Bytes of Fetch answers held in memory.
    pub bytes_held: u64,
}

/// A running proxy; stops accepting and closes its connections when dropped.
pub struct ReplayProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

struct Shared {
    upstream: String,
    replaying: AtomicBool,
    stopping: AtomicBool,
    /// Fetch request (its version and body, partitions sorted, in `fetch_key`'s form) → answer
    /// frame (size prefix removed, the recorded correlation id still in it).
    answers: Mutex<HashMap<String, Bytes>>,
    /// A partition's recorded answer at one fetch offset: records (if any; empty only at the
    /// log end) and high watermark.
    partitions: Mutex<HashMap<PartitionKey, PartitionData>>,
    /// The broker's own cap on an answer's record bytes (its `fetch.max.bytes`, or its
    /// `fetch.low.latency.max.bytes` where set and smaller: the proxy's clients are on
    /// loopback), which composed answers keep to as well.
    answer_cap: u64,
    replayed: AtomicU64,
    forwarded: AtomicU64,
    held: AtomicU64,
    /// Live client connections by number, shut down when the proxy stops.
    clients: Mutex<HashMap<u64, TcpStream>>,
    /// The first error a connection ended with, other than the peer closing.
    error: Mutex<Option<String>>,
}

const FETCH: i16 = ApiKey::Fetch as i16;
const METADATA: i16 = ApiKey::Metadata as i16;

impl ReplayProxy {
    /// Listens on a free loopback port and records what `upstream` (`host:port`) answers;
    /// `answer_cap` is the broker's `fetch.max.bytes`, if known.
    pub fn start(upstream: &str, answer_cap: Option<u64>) -> Result<ReplayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").context("replay proxy: binding")?;
        let addr = listener.local_addr().context("replay proxy: address")?;
        let shared = Arc::new(Shared {
            upstream: upstream.to_string(),
            replaying: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            answers: Mutex::new(HashMap::new()),
            partitions: Mutex::new(HashMap::new()),
            answer_cap: answer_cap.unwrap_or(u64::MAX),
            replayed: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            held: AtomicU64::new(0),
            clients: Mutex::new(HashMap::new()),
            error: Mutex::new(None),
        });
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name("replay-accept".into())
            .spawn(move || accept_loop(listener, s, addr.port()))
            .context("replay proxy: accept thread")?;
        Ok(ReplayProxy {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The address consumers connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// From now on, answers Fetches seen while recording from memory. Resets the Fetch counts.
    pub fn replay(&self) {
        self.shared.replayed.store(0, Ordering::SeqCst);
        self.shared.forwarded.store(0, Ordering::SeqCst);
        self.shared.replaying.store(true, Ordering::SeqCst);
    }

    pub fn counts(&self) -> ReplayCounts {
        ReplayCounts {
            fetches_replayed: self.shared.replayed.load(Ordering::SeqCst),
            fetches_forwarded: self.shared.forwarded.load(Ordering::SeqCst),
            bytes_held: self.shared.held.load(Ordering::SeqCst),
        }
    }

    /// The cap on composed answers' record bytes, if the broker's is known.
    pub fn answer_cap(&self) -> Option<u64> {
        (self.shared.answer_cap != u64::MAX).then_some(self.shared.answer_cap)
    }

    /// The first error a proxied connection ended with, if any.
    pub fn error(&self) -> Option<String> {
        lock(&self.shared.error).clone()
    }
}

impl Drop for ReplayProxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the accept loop, which then sees `stopping`.
        let _ = TcpStream::connect(self.addr);
        for (_, c) in lock(&self.shared.clients).drain() {
            let _ = c.shutdown(Shutdown::Both);
        }
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A connection thread that panicked leaves plain data behind; keep using it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, port: u16) {
    for (number, conn) in (0u64..).zip(listener.incoming()) {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(mut client) = conn else { continue };
        if let Ok(c) = client.try_clone() {
            lock(&shared.clients).insert(number, c);
        }
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("replay-conn".into())
            .spawn(move || {
                if let Err(e) = serve(&mut client, &s, port) {
                    if !s.stopping.load(Ordering::SeqCst) {
                        lock(&s.error).get_or_insert_with(|| format!("{e:#}"));
                    }
                }
                // The clone kept for `Drop` holds the socket open: close it for both.
                let _ = client.shutdown(Shutdown::Both);
                lock(&s.clients).remove(&number);
            });
        if spawned.is_err() {
            lock(&shared.error).get_or_insert_with(|| "replay proxy: no thread".to_string());
        }
    }
}

/// Reads one frame (size prefix removed); `None` when the peer closed between frames.
fn read_frame(s: &mut TcpStream, who: &str) -> Result<Option<Vec<u8>>> {
    let mut size = [0u8; 4];
    match s.read_exact(&mut size) {
        Ok(()) => {}
        // Between frames, a reset is the peer going away too (kcat exits without a goodbye).
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(e).with_context(|| format!("reading a frame from the {who}")),
    }
    let raw = i32::from_be_bytes(size);
    let n = match usize::try_from(raw) {
        Ok(n) if (4..=MAX_RESPONSE_BYTES).contains(&n) => n,
        _ => bail!("frame size {raw} from the {who} is outside 4..={MAX_RESPONSE_BYTES}"),
    };
    let mut frame = vec![0u8; n];
    s.read_exact(&mut frame)
        .with_context(|| format!("reading a {n}-byte frame from the {who}"))?;
    Ok(Some(frame))
}

fn write_all_vectored(s: &mut TcpStream, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    while !bufs.is_empty() {
        match s.write_vectored(bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes an answer frame with `correlation` in place of the one recorded in it.
fn answer(s: &mut TcpStream, frame: &[u8], correlation: [u8; 4]) -> io::Result<()> {
    let size = u32::try_from(frame.len())
        .map_err(|_| io::Error::other("answer over 4 GiB"))?
        .to_be_bytes();
    let rest = frame.get(4..).unwrap_or_default();
    write_all_vectored(
        s,
        &mut [
            IoSlice::new(&size),
            IoSlice::new(&correlation),
            IoSlice::new(rest),
        ],
    )
}

fn serve(client: &mut TcpStream, shared: &Shared, port: u16) -> Result<()> {
    client.set_nodelay(true).context("TCP_NODELAY")?;
    let mut upstream: Option<TcpStream> = None;
    // Composed answers are encoded here, reused: a fresh buffer per answer cost the proxy a
    // page fault per 4 KiB, enough to make it, not the consumer, the bound.
    let mut scratch = BytesMut::new();
    while let Some(request) = read_frame(client, "client")? {
        if request.len() < 8 {
            bail!("a {}-byte request has no header", request.len());
        }
        let api_key = i16::from_be_bytes([request[0], request[1]]);
        let api_version = i16::from_be_bytes([request[2], request[3]]);
        let correlation = [request[4], request[5], request[6], request[7]];
        let replaying = shared.replaying.load(Ordering::SeqCst);
        let fetch = if api_key == FETCH {
            Some(fetch_key(&request).context("a Fetch request")?)
        } else {
            None
        };
        if let (Some((key, fetch)), true) = (&fetch, replaying) {
            let replayed = replay(
                client,
                shared,
                key,
                fetch,
                api_version,
                correlation,
                &mut scratch,
            )?;
            if replayed {
                shared.replayed.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        }
        let reply = forward(&mut upstream, shared, &request)?;
        let reply = Bytes::from(if api_key == METADATA {
            rewrite_metadata(reply, api_version, port)?
        } else {
            reply
        });
        if let Some((key, fetch)) = fetch {
            shared.forwarded.fetch_add(1, Ordering::Relaxed);
            if !replaying {
                record_partitions(&mut lock(&shared.partitions), &fetch, &reply, api_version)?;
                lock(&shared.answers).entry(key).or_insert_with(|| {
                    shared.held.fetch_add(reply.len() as u64, Ordering::Relaxed);
                    reply.clone()
                });
            }
        }
        answer(client, &reply, correlation).context("answering the client")?;
    }
    Ok(())
}

/// Answers a Fetch from what was recorded: the answer held for the same request, or one
/// composed from the partitions' recorded data. Whether it could.
fn replay(
    client: &mut TcpStream,
    shared: &Shared,
    key: &str,
    fetch: &FetchRequest,
    api_version: i16,
    correlation: [u8; 4],
    scratch: &mut BytesMut,
) -> Result<bool> {
    let held = lock(&shared.answers).get(key).cloned();
    Ok(match held {
        Some(frame) => {
            answer(client, &frame, correlation).context("answering the client")?;
            true
        }
        None => {
            let composed = compose(
                &lock(&shared.partitions),
                fetch,
                api_version,
                shared.answer_cap,
                scratch,
            )?;
            if composed {
                answer(client, scratch, correlation).context("answering the client")?;
            }
            composed
        }
    })
}

/// Sends `request` to the broker (connecting on first use) and reads its answer.
fn forward(upstream: &mut Option<TcpStream>, shared: &Shared, request: &[u8]) -> Result<Vec<u8>> {
    let up = match upstream {
        Some(up) => up,
        None => {
            let up = TcpStream::connect(&shared.upstream)
                .with_context(|| format!("connecting to {}", shared.upstream))?;
            up.set_nodelay(true).context("TCP_NODELAY")?;
            upstream.insert(up)
        }
    };
    let size = u32::try_from(request.len())
        .expect("a frame read under the size check fits in 32 bits")
        .to_be_bytes();
    write_all_vectored(up, &mut [IoSlice::new(&size), IoSlice::new(request)])
        .context("forwarding to the broker")?;
    let Some(reply) = read_frame(up, "broker")? else {
        bail!("the broker closed the connection before answering");
    };
    Ok(reply)
}

/// A partition at a fetch offset: topic name (before Fetch v13) or id (from v13), partition,
/// offset.
type PartitionKey = (String, Uuid, i32, i64);

/// Keeps each partition's part of a recorded Fetch answer under the offset it was fetched at
/// (record bytes shared with the whole answer, not copied): those with records, and those at
/// the log end. Nothing is kept from an answer with an error.
fn record_partitions(
    into: &mut HashMap<PartitionKey, PartitionData>,
    fetch: &FetchRequest,
    reply: &Bytes,
    version: i16,
) -> Result<()> {
    let mut buf = reply.clone();
    ResponseHeader::decode(&mut buf, FetchResponse::header_version(version))
        .context("Fetch answer header")?;
    let answer = FetchResponse::decode(&mut buf, version).context("Fetch answer body")?;
    if answer.error_code != 0 {
        return Ok(());
    }
    let mut offsets = HashMap::new();
    for t in &fetch.topics {
        for p in &t.partitions {
            offsets.insert(
                (t.topic.0.to_string(), t.topic_id, p.partition),
                p.fetch_offset,
            );
        }
    }
    for t in answer.responses {
        for p in t.partitions {
            let len = p.records.as_ref().map_or(0, Bytes::len);
            let at = (t.topic.0.to_string(), t.topic_id, p.partition_index);
            let Some(&offset) = offsets.get(&at) else {
                continue;
            };
            if p.error_code == 0 && (len > 0 || offset >= p.high_watermark) {
                into.insert((at.0, at.1, at.2, offset), p);
            }
        }
    }
    Ok(())
}

/// Encodes into `out` (cleared first) an answer to `fetch` from recorded partition answers, in
/// the request's order: each partition's records while the request's `max_bytes` and the
/// broker's `cap` allow (the first always), the later ones empty, as a broker answers. `false`
/// when a partition was never recorded at its offset.
fn compose(
    recorded: &HashMap<PartitionKey, PartitionData>,
    fetch: &FetchRequest,
    version: i16,
    cap: u64,
    out: &mut BytesMut,
) -> Result<bool> {
    let mut answer = FetchResponse::default();
    let mut total = 0usize;
    let limit = usize::try_from(fetch.max_bytes)
        .unwrap_or(usize::MAX)
        .min(usize::try_from(cap).unwrap_or(usize::MAX));
    for t in &fetch.topics {
        let mut topic = FetchableTopicResponse::default();
        topic.topic = t.topic.clone();
        topic.topic_id = t.topic_id;
        for p in &t.partitions {
            let key = (
                t.topic.0.to_string(),
                t.topic_id,
                p.partition,
                p.fetch_offset,
            );
            let Some(data) = recorded.get(&key) else {
                return Ok(false);
            };
            let mut data = data.clone();
            let len = data.records.as_ref().map_or(0, Bytes::len);
            if total > 0 && total + len > limit {
                data.records = Some(Bytes::new());
            } else {
                total += len;
            }
            topic.partitions.push(data);
        }
        answer.responses.push(topic);
    }
    out.clear();
    ResponseHeader::default()
        .encode(out, FetchResponse::header_version(version))
        .context("composed Fetch answer header")?;
    answer
        .encode(out, version)
        .context("composed Fetch answer body")?;
    Ok(true)
}

/// What identifies a Fetch request's answer: the request (version, limits, session,
/// partitions and their offsets) with its topics and partitions sorted, without its header;
/// and the request as sent.
fn fetch_key(frame: &[u8]) -> Result<(String, FetchRequest)> {
    let mut buf = Bytes::copy_from_slice(frame);
    let header =
        kafka_protocol::protocol::decode_request_header_from_buffer(&mut buf).context("header")?;
    let version = header.request_api_version;
    let request = FetchRequest::decode(&mut buf, version).context("body")?;
    let mut r = request.clone();
    for t in &mut r.topics {
        t.partitions.sort_by_key(|p| p.partition);
    }
    r.topics
        .sort_by(|x, y| (x.topic.0.as_str(), x.topic_id).cmp(&(y.topic.0.as_str(), y.topic_id)));
    for t in &mut r.forgotten_topics_data {
        t.partitions.sort_unstable();
    }
    r.forgotten_topics_data
        .sort_by(|x, y| (x.topic.0.as_str(), x.topic_id).cmp(&(y.topic.0.as_str(), y.topic_id)));
    Ok((format!("v{version} {r:?}"), request))
}

/// A Metadata answer that names the proxy as the (single) broker.
fn rewrite_metadata(frame: Vec<u8>, version: i16, port: u16) -> Result<Vec<u8>> {
    let header_version = MetadataResponse::header_version(version);
    let mut buf = Bytes::from(frame);
    let header =
        ResponseHeader::decode(&mut buf, header_version).context("Metadata answer header")?;
    let mut body = MetadataResponse::decode(&mut buf, version).context("Metadata answer body")?;
    if body.brokers.len() > 1 {
        bail!(
            "the replay proxy serves a single broker; Metadata names {}",
            body.brokers.len()
        );
    }
    for b in &mut body.brokers {
        b.host = StrBytes::from_static_str("127.0.0.1");
        b.port = i32::from(port);
    }
    let mut out = BytesMut::new();
    header
        .encode(&mut out, header_version)
        .context("Metadata answer header")?;
    body.encode(&mut out, version)
        .context("Metadata answer body")?;
    Ok(out.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gregor_broker::{Broker, BrokerConfig, BrokerOptions};
    use gregor_client::codec::{decode_response, encode_request};
    use gregor_client::{Client, ClientConfig};
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
    use std::time::Duration;

    const TOPIC: &str = "replayed";

    /// A single-node broker in `dir`, listening on a free loopback port; stops when the
    /// returned sender is dropped.
    async fn broker(dir: &std::path::Path) -> (String, tokio::sync::watch::Sender<bool>) {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let opts = BrokerOptions {
            listeners: Some(format!("PLAINTEXT://127.0.0.1:{port}")),
            data_dir: Some(dir.to_path_buf()),
            ..BrokerOptions::default()
        };
        let config = BrokerConfig::from_options(&opts).expect("valid config");
        let listeners = gregor_broker::server::bind_listeners(&config).expect("listens");
        let b = Broker::start(config).await.expect("starts");
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(gregor_broker::server::serve(b, listeners, rx));
        (format!("127.0.0.1:{port}"), tx)
    }

    /// Appends `batches` batches of 10 records of 100 bytes to `TOPIC`, its two partitions in
    /// turn.
    async fn produce(client: &Client, batches: u64) {
        let leaders = crate::bench_kafka::leaders(client, TOPIC)
            .await
            .expect("leaders");
        let batch = crate::bench_kafka::batch(10, 100).expect("batch");
        crate::bench_consume::fill(client, TOPIC, Arc::new(leaders), batch, batches)
            .await
            .expect("produced");
    }

    /// A Fetch of `TOPIC`'s partitions at these offsets, in this order.
    fn fetch_of(parts: &[(i32, i64)], max_bytes: i32) -> FetchRequest {
        let mut t = FetchTopic::default();
        t.topic = TopicName(StrBytes::from_static_str(TOPIC));
        for &(partition, offset) in parts {
            let mut p = FetchPartition::default();
            p.partition = partition;
            p.fetch_offset = offset;
            p.partition_max_bytes = 1 << 20;
            p.current_leader_epoch = -1;
            p.log_start_offset = -1;
            p.last_fetched_epoch = -1;
            t.partitions.push(p);
        }
        let mut r = FetchRequest::default();
        r.replica_id = BrokerId(-1);
        r.max_wait_ms = 0;
        r.min_bytes = 1;
        r.max_bytes = max_bytes;
        r.session_id = 0;
        r.session_epoch = -1;
        r.topics = vec![t];
        r
    }

    fn fetch(offset: i64) -> FetchRequest {
        fetch_of(&[(0, offset)], 1 << 20)
    }

    /// One partition's answer: (partition, high watermark, record bytes).
    type Answered = (i32, i64, Bytes);

    /// Sends `r` (version 12, which names topics) on `s`: the answer's correlation id and
    /// partitions, in its order.
    fn send(s: &mut TcpStream, r: &FetchRequest, correlation: i32) -> (i32, Vec<Answered>) {
        let frame = encode_request(r, 12, correlation, "replay-test").expect("encodes");
        s.write_all(&frame).expect("sent");
        let answer = read_frame(s, "proxy").expect("read").expect("an answer");
        let got = i32::from_be_bytes(answer[..4].try_into().expect("four bytes"));
        let r: FetchResponse =
            decode_response::<FetchRequest>(Bytes::from(answer), 12).expect("decodes");
        let parts = r.responses[0]
            .partitions
            .iter()
            .map(|p| {
                assert_eq!(p.error_code, 0, "{p:?}");
                let records = p.records.clone().unwrap_or_default();
                (p.partition_index, p.high_watermark, records)
            })
            .collect();
        (got, parts)
    }

    /// Recorded answers come back from memory byte for byte, with the new request's
    /// correlation id, even after the log has grown; so does a Fetch of recorded partitions in
    /// another combination, within its `max_bytes`; a Fetch at an offset not recorded is
    /// forwarded.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn recorded_fetches_are_answered_from_memory_and_others_forwarded() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (addr, _stop) = broker(dir.path()).await;
        let mut cfg = ClientConfig::new(&addr).expect("config");
        cfg.connect_timeout = Duration::from_secs(5);
        let client = Client::connect(cfg).await.expect("connects");
        let admin = gregor_client::Admin::new(client.clone());
        admin
            .create_topics(
                vec![gregor_client::admin::topics::NewTopic {
                    name: TOPIC.into(),
                    num_partitions: Some(2),
                    ..Default::default()
                }],
                Default::default(),
            )
            .await
            .expect("topic created");
        produce(&client, 10).await;

        let proxy = ReplayProxy::start(&addr, None).expect("proxy starts");
        let to = proxy.addr();
        let (p0, p1) = tokio::task::spawn_blocking(move || {
            let mut s = TcpStream::connect(to).expect("connects to the proxy");
            let p0 = send(&mut s, &fetch(0), 7);
            let p1 = send(&mut s, &fetch_of(&[(1, 0)], 1 << 20), 8);
            (p0, p1)
        })
        .await
        .expect("recording");
        assert_eq!(p0.0, 7);
        let (p0, p1) = (p0.1[0].clone(), p1.1[0].clone());
        assert_eq!(
            (p0.0, p0.1, p1.0, p1.1),
            (0, 50, 1, 50),
            "five batches each"
        );
        assert!(!p0.2.is_empty() && !p1.2.is_empty());
        let counts = proxy.counts();
        assert_eq!((counts.fetches_replayed, counts.fetches_forwarded), (0, 2));
        assert!(
            counts.bytes_held > (p0.2.len() + p1.2.len()) as u64,
            "{counts:?}"
        );

        // The log grows; the broker would now answer with higher high watermarks.
        produce(&client, 10).await;
        proxy.replay();
        let (whole, both, capped, fresh) = tokio::task::spawn_blocking(move || {
            let mut s = TcpStream::connect(to).expect("connects to the proxy");
            (
                send(&mut s, &fetch(0), 9),
                send(&mut s, &fetch_of(&[(1, 0), (0, 0)], 1 << 20), 10),
                send(&mut s, &fetch_of(&[(0, 0), (1, 0)], 1), 11),
                send(&mut s, &fetch(10), 12),
            )
        })
        .await
        .expect("replaying");
        assert_eq!(whole, (9, vec![p0.clone()]), "the new correlation id");
        assert_eq!(
            both,
            (10, vec![p1.clone(), p0.clone()]),
            "in the request's order"
        );
        let p1_empty = (1, p1.1, Bytes::new());
        assert_eq!(
            capped,
            (11, vec![p0.clone(), p1_empty]),
            "max_bytes: the first only"
        );
        assert_eq!(fresh.0, 12);
        assert_eq!(fresh.1[0].1, 100, "a Fetch not recorded reaches the broker");
        let counts = proxy.counts();
        assert_eq!((counts.fetches_replayed, counts.fetches_forwarded), (3, 1));
        assert_eq!(proxy.error(), None);
    }

    /// A composed answer follows the request's order and keeps within its `max_bytes` and the
    /// broker's cap, the first partition's records always whole; a partition never recorded
    /// at its offset leaves the request to the broker.
    #[test]
    fn composed_answers_keep_to_the_request_and_the_brokers_cap() {
        let mut recorded = HashMap::new();
        for p in 0..3 {
            let mut d = PartitionData::default();
            d.partition_index = p;
            d.high_watermark = 100;
            d.records = Some(Bytes::from(vec![p as u8; 100]));
            recorded.insert((TOPIC.to_string(), Uuid::nil(), p, 0), d);
        }
        let request = fetch_of(&[(2, 0), (0, 0), (1, 0)], 1_000);
        let mut out = BytesMut::from(&b"left from an earlier answer"[..]);
        let mut sizes = |r: &FetchRequest, cap| {
            let composed = compose(&recorded, r, 12, cap, &mut out).expect("encodes");
            assert!(composed, "every partition recorded");
            let frame = Bytes::copy_from_slice(&out);
            let answer = decode_response::<FetchRequest>(frame, 12).expect("decodes");
            answer.responses[0]
                .partitions
                .iter()
                .map(|p| (p.partition_index, p.records.as_ref().map_or(0, Bytes::len)))
                .collect::<Vec<_>>()
        };
        assert_eq!(sizes(&request, u64::MAX), [(2, 100), (0, 100), (1, 100)]);
        assert_eq!(sizes(&request, 250), [(2, 100), (0, 100), (1, 0)]);
        assert_eq!(sizes(&request, 50), [(2, 100), (0, 0), (1, 0)]);
        let small = fetch_of(&[(2, 0), (0, 0), (1, 0)], 150);
        assert_eq!(sizes(&small, u64::MAX), [(2, 100), (0, 0), (1, 0)]);
        let unrecorded = fetch_of(&[(0, 0), (1, 5)], 1_000);
        assert!(
            !compose(&recorded, &unrecorded, 12, u64::MAX, &mut BytesMut::new()).expect("no error")
        );
    }

    /// Bad frames end their connection with a clear error; the proxy goes on accepting.
    #[test]
    fn bad_frames_end_their_connection_and_the_proxy_keeps_accepting() {
        // Nothing listens upstream: these frames must fail before any forwarding.
        let proxy = ReplayProxy::start("127.0.0.1:1", None).expect("proxy starts");
        let closed = |bytes: &[u8]| {
            let mut s = TcpStream::connect(proxy.addr()).expect("connects");
            s.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            s.write_all(bytes).expect("sent");
            let mut buf = [0u8; 1];
            match s.read(&mut buf) {
                Ok(0) => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
                // A timeout or bytes: the proxy did not close the connection.
                other => panic!("the proxy should close the connection: {other:?}"),
            }
        };
        let wait_for_error = |what: &str| {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(e) = proxy.error() {
                    assert!(e.contains(what), "{e}");
                    return;
                }
                assert!(std::time::Instant::now() < deadline, "no error recorded");
                std::thread::yield_now();
            }
        };
        closed(&i32::MAX.to_be_bytes());
        wait_for_error("frame size 2147483647 from the client");
        let proxy_error_kept = proxy.error();
        closed(&[0, 0, 0, 3, 1, 2, 3]);
        closed(&(-1i32).to_be_bytes());
        // The first error is the one kept; the later connections were still accepted and
        // served (each got an answer: a closed connection, not a hang).
        assert_eq!(proxy.error(), proxy_error_kept);
    }

    /// librdkafka rotates its partitions from one Fetch to the next: the same partitions and
    /// offsets in another order are the same request; another offset is not.
    #[test]
    fn fetch_keys_ignore_partition_order_and_correlation_ids() {
        let request = |offsets: &[(i32, i64)], correlation: i32| {
            let mut r = fetch(0);
            let template = r.topics[0].partitions[0].clone();
            r.topics[0].partitions = offsets
                .iter()
                .map(|&(partition, fetch_offset)| {
                    let mut p = template.clone();
                    p.partition = partition;
                    p.fetch_offset = fetch_offset;
                    p
                })
                .collect();
            let frame = encode_request(&r, 11, correlation, "key-test").expect("encodes");
            fetch_key(&frame[4..]).expect("a key").0
        };
        let key = request(&[(0, 10), (1, 20), (2, 30)], 1);
        assert_eq!(key, request(&[(2, 30), (0, 10), (1, 20)], 2));
        assert_ne!(key, request(&[(0, 10), (1, 21), (2, 30)], 1));
        assert_ne!(key, request(&[(0, 10), (1, 20)], 1));
        let err = fetch_key(&[0, 1, 0, 11, 0, 0, 0, 1]).expect_err("truncated");
        assert!(format!("{err:#}").contains("header"), "{err:#}");
    }

    fn metadata(brokers: &[(i32, &str, i32)]) -> Vec<u8> {
        let mut body = MetadataResponse::default();
        body.brokers = brokers
            .iter()
            .map(|(id, host, port)| {
                let mut b = MetadataResponseBroker::default();
                b.node_id = BrokerId(*id);
                b.host = StrBytes::from_string(host.to_string());
                b.port = *port;
                b
            })
            .collect();
        let mut t = MetadataResponseTopic::default();
        t.name = Some(TopicName(StrBytes::from_static_str(TOPIC)));
        body.topics = vec![t];
        let mut out = BytesMut::new();
        let hv = MetadataResponse::header_version(12);
        ResponseHeader::default()
            .with_correlation_id(5)
            .encode(&mut out, hv)
            .expect("header");
        body.encode(&mut out, 12).expect("body");
        out.to_vec()
    }

    #[test]
    fn metadata_names_the_proxy_and_keeps_the_rest() {
        let rewritten = rewrite_metadata(metadata(&[(1, "broker.example", 9092)]), 12, 4321)
            .expect("rewritten");
        let r = decode_response::<kafka_protocol::messages::MetadataRequest>(
            Bytes::from(rewritten.clone()),
            12,
        )
        .expect("decodes");
        assert_eq!(r.brokers.len(), 1);
        assert_eq!(r.brokers[0].node_id, BrokerId(1));
        assert_eq!(
            (r.brokers[0].host.as_str(), r.brokers[0].port),
            ("127.0.0.1", 4321)
        );
        assert_eq!(r.topics[0].name.as_ref().map(|n| n.0.as_str()), Some(TOPIC));
        assert_eq!(&rewritten[..4], &5i32.to_be_bytes(), "correlation id kept");

        let err = rewrite_metadata(metadata(&[(1, "a", 1), (2, "b", 2)]), 12, 4321)
            .expect_err("two brokers");
        assert!(err.to_string().contains("single broker"), "{err}");
        let err = rewrite_metadata(vec![0, 0, 0, 5, 0xff], 12, 4321).expect_err("garbage");
        assert!(format!("{err:#}").contains("Metadata answer"), "{err:#}");
    }
}
