//! SCRAM credentials as metadata: AlterUserScramCredentials and DescribeUserScramCredentials on
//! the controller, the records' encoding, and snapshots that carry them.

mod common;
use common::*;
use gregor_meta::*;
use gregor_sasl::{Password, SaltedPassword, ScramClient, ScramServer};
use kafka_protocol::ResponseError;

const SHA256: i8 = 1;
const SHA512: i8 = 2;

fn upsert(name: &str, mechanism: i8, password: &str, iterations: i32) -> ScramCredentialUpsertion {
    let salt = format!("salt-of-{name}").into_bytes();
    let salted = ScramMechanism::from_type_id(mechanism)
        .map(|m| m.salted_password(&Password::new(password), &salt, iterations.clamp(1, 20_000)))
        .unwrap_or_else(|| SaltedPassword::from_bytes(vec![0; 32]));
    ScramCredentialUpsertion {
        name: name.into(),
        mechanism,
        iterations,
        salt,
        salted_password: salted,
    }
}

fn delete(name: &str, mechanism: i8) -> ScramCredentialDeletion {
    ScramCredentialDeletion {
        name: name.into(),
        mechanism,
    }
}

/// Runs the request and commits its records; returns each user's error code (None: success).
fn alter(
    c: &mut Cluster,
    deletions: &[ScramCredentialDeletion],
    upsertions: &[ScramCredentialUpsertion],
) -> Vec<(String, Option<ResponseError>)> {
    let res = c
        .controller
        .alter_user_scram_credentials(deletions, upsertions);
    c.commit(&res.records);
    res.response
        .into_iter()
        .map(|r| (r.user, r.result.err().map(|e| e.code)))
        .collect()
}

/// A whole SCRAM exchange against the committed image's credential.
fn authenticates(image: &MetadataImage, user: &str, m: ScramMechanism, password: &str) -> bool {
    let mut client = ScramClient::new(m, user, Password::new(password), "clientnonce");
    let mut server = ScramServer::new(m, "servernonce".into());
    let mut run = || -> Result<(), gregor_sasl::SaslError> {
        let cf = client.client_first()?;
        let lookup = |u: &str| image.scram_credentials().get(u, m).cloned();
        let sf = server.client_first(&cf, lookup)?;
        let cfin = client.server_first(&sf)?;
        let sfin = server.client_final(&cfin)?;
        client.server_final(&sfin)
    };
    run().is_ok()
}

/// Every user's (mechanism, iterations), as DescribeUserScramCredentials shows them.
fn described(image: &MetadataImage) -> Vec<(String, Vec<(ScramMechanism, i32)>)> {
    describe_user_scram_credentials(image, None)
        .iter()
        .map(|d| {
            let infos = d.result.as_ref().expect("described");
            let shown = infos.iter().map(|i| (i.mechanism, i.iterations)).collect();
            (d.user.clone(), shown)
        })
        .collect()
}

#[test]
fn upsert_describe_authenticate_and_delete() {
    let mut c = Cluster::with_brokers(&[1]);
    let results = alter(
        &mut c,
        &[],
        &[
            upsert("alice", SHA512, "alice-secret", 8192),
            upsert("alice", SHA256, "alice-secret", 4096),
            upsert("bob", SHA256, "bob-secret", 4096),
        ],
    );
    assert_eq!(results, vec![("alice".into(), None), ("bob".into(), None)]);
    assert!(authenticates(
        &c.image,
        "alice",
        ScramMechanism::Sha512,
        "alice-secret"
    ));
    assert!(!authenticates(
        &c.image,
        "alice",
        ScramMechanism::Sha512,
        "bob-secret"
    ));
    assert!(authenticates(
        &c.image,
        "bob",
        ScramMechanism::Sha256,
        "bob-secret"
    ));
    assert!(!authenticates(
        &c.image,
        "bob",
        ScramMechanism::Sha512,
        "bob-secret"
    ));

    assert_eq!(
        described(&c.image),
        vec![
            (
                "alice".to_string(),
                vec![
                    (ScramMechanism::Sha256, 4096),
                    (ScramMechanism::Sha512, 8192)
                ]
            ),
            ("bob".to_string(), vec![(ScramMechanism::Sha256, 4096)]),
        ]
    );

    assert_eq!(
        alter(&mut c, &[delete("alice", SHA512)], &[]),
        vec![("alice".into(), None)]
    );
    assert!(!authenticates(
        &c.image,
        "alice",
        ScramMechanism::Sha512,
        "alice-secret"
    ));
    assert!(authenticates(
        &c.image,
        "alice",
        ScramMechanism::Sha256,
        "alice-secret"
    ));
    assert_eq!(
        alter(&mut c, &[delete("alice", SHA256)], &[]),
        vec![("alice".into(), None)]
    );
    let named = describe_user_scram_credentials(&c.image, Some(&["alice".into(), "bob".into()]));
    assert_eq!(named[0].user, "alice");
    assert_eq!(
        named[0].result.as_ref().map_err(|e| e.code),
        Err(ResponseError::ResourceNotFound)
    );
    assert!(named[1].result.is_ok());
}

#[test]
fn per_user_errors_are_kafkas() {
    let mut c = Cluster::with_brokers(&[1]);
    let results = alter(
        &mut c,
        &[delete("ghost", SHA256), delete("weird", 7)],
        &[
            upsert("few", SHA256, "pw", 4095),
            upsert("many", SHA512, "pw", 16385),
            upsert("", SHA256, "pw", 4096),
            upsert("twice", SHA256, "a", 4096),
            upsert("twice", SHA256, "b", 4096),
            upsert("unknown", 0, "pw", 4096),
            upsert("ok", SHA512, "pw", 16384),
        ],
    );
    use ResponseError::*;
    assert_eq!(
        results,
        vec![
            ("ghost".into(), Some(ResourceNotFound)),
            ("weird".into(), Some(UnsupportedSaslMechanism)),
            ("few".into(), Some(UnacceptableCredential)),
            ("many".into(), Some(UnacceptableCredential)),
            ("".into(), Some(UnacceptableCredential)),
            ("twice".into(), Some(DuplicateResource)),
            ("unknown".into(), Some(UnsupportedSaslMechanism)),
            ("ok".into(), None),
        ]
    );
    let users: Vec<&String> = c.image.scram_credentials().users().keys().collect();
    assert_eq!(users, vec!["ok"]);
}

#[test]
fn one_bad_operation_fails_all_of_that_users_operations() {
    let mut c = Cluster::with_brokers(&[1]);
    alter(&mut c, &[], &[upsert("carol", SHA256, "old", 4096)]);
    // Deleting a credential carol does not have sinks her upsertion in the same request.
    let results = alter(
        &mut c,
        &[delete("carol", SHA512)],
        &[
            upsert("carol", SHA256, "new", 4096),
            upsert("dave", SHA256, "d", 4096),
        ],
    );
    assert_eq!(
        results,
        vec![
            ("carol".into(), Some(ResponseError::ResourceNotFound)),
            ("dave".into(), None)
        ]
    );
    assert!(authenticates(
        &c.image,
        "carol",
        ScramMechanism::Sha256,
        "old"
    ));
    assert!(!authenticates(
        &c.image,
        "carol",
        ScramMechanism::Sha256,
        "new"
    ));
    // A delete and an upsert of the same mechanism in one request: DUPLICATE_RESOURCE.
    let results = alter(
        &mut c,
        &[delete("carol", SHA256)],
        &[upsert("carol", SHA256, "x", 4096)],
    );
    assert_eq!(
        results,
        vec![("carol".into(), Some(ResponseError::DuplicateResource))]
    );
    let dup = describe_user_scram_credentials(&c.image, Some(&["dave".into(), "dave".into()]));
    assert_eq!(
        dup[0].result.as_ref().map_err(|e| e.code),
        Err(ResponseError::DuplicateResource)
    );
}

#[test]
fn records_round_trip_hide_keys_and_survive_a_snapshot() {
    let mut c = Cluster::with_brokers(&[1, 2]);
    c.create(CreatableTopic {
        num_partitions: 2,
        replication_factor: 2,
        ..CreatableTopic::new("t")
    })
    .expect("topic created");
    alter(
        &mut c,
        &[],
        &[
            upsert("alice", SHA512, "alice-secret", 8192),
            upsert("bob", SHA256, "b", 4096),
        ],
    );
    alter(&mut c, &[delete("bob", SHA256)], &[]);
    for r in &c.log {
        assert_eq!(&MetadataRecord::decode(&r.encode()).expect("decodes"), r);
    }
    let upsert_record = c
        .log
        .iter()
        .find(|r| matches!(r, MetadataRecord::UserScramCredential(_)))
        .expect("an upsert record");
    let MetadataRecord::UserScramCredential(u) = upsert_record else {
        unreachable!("matched above")
    };
    let text = format!("{upsert_record:?}");
    assert!(text.contains("alice") && text.contains("8192"), "{text}");
    assert!(
        !text.contains(&format!("{:?}", u.credential.stored_key)),
        "{text}"
    );
    assert!(!text.contains("alice-secret"), "{text}");

    let snapshot = c.image.to_records();
    assert!(snapshot
        .iter()
        .any(|r| matches!(r, MetadataRecord::UserScramCredential(u) if u.name == "alice")));
    let rebuilt = MetadataImage::from_records(&snapshot).expect("snapshot applies");
    assert_eq!(rebuilt, c.image);
    assert!(authenticates(
        &rebuilt,
        "alice",
        ScramMechanism::Sha512,
        "alice-secret"
    ));
    assert!(rebuilt.scram_credentials().user("bob").is_none());
}

#[test]
fn malformed_scram_records_are_decode_errors() {
    let mut c = Cluster::with_brokers(&[1]);
    alter(&mut c, &[], &[upsert("alice", SHA256, "pw", 4096)]);
    let bytes = c.log.last().expect("record").encode();
    for cut in 0..bytes.len() {
        assert!(
            MetadataRecord::decode(&bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    let remove = MetadataRecord::RemoveUserScramCredential(RemoveUserScramCredentialRecord {
        name: "alice".into(),
        mechanism: ScramMechanism::Sha256,
    });
    let mut bad = remove.encode();
    *bad.last_mut().expect("mechanism byte") = 9;
    assert!(matches!(
        MetadataRecord::decode(&bad),
        Err(DecodeError::Invalid { .. })
    ));
    // Removing a credential the image does not hold does not apply.
    let mut image = MetadataImage::new();
    assert!(image.apply(&remove).is_err());
    assert_eq!(image, MetadataImage::new());
}

#[test]
fn bootstrap_records_are_due_only_while_the_log_is_empty() {
    let mut c = Cluster::new(&[("node.id", "0")]);
    let credential = ScramCredential::from_password(
        ScramMechanism::Sha512,
        &Password::new("admin-secret"),
        b"bootstrap-salt",
        4096,
    )
    .expect("credential");
    let boot = vec![MetadataRecord::UserScramCredential(
        UserScramCredentialRecord {
            name: "admin".into(),
            mechanism: ScramMechanism::Sha512,
            credential,
        },
    )];
    assert!(c.controller.bootstrap_records_due().is_empty(), "none set");
    c.controller.set_bootstrap_records(boot.clone());
    assert_eq!(c.controller.bootstrap_records_due(), boot);
    // The first write commits them (with whatever it carries); after that they are never due
    // again, even once the user is deleted.
    c.add_broker(1, None);
    let due = c.controller.bootstrap_records_due();
    assert!(due.is_empty());
    c.commit(&boot);
    assert!(authenticates(
        &c.image,
        "admin",
        ScramMechanism::Sha512,
        "admin-secret"
    ));
    assert_eq!(
        alter(&mut c, &[delete("admin", SHA512)], &[]),
        vec![("admin".into(), None)]
    );
    assert!(c.controller.bootstrap_records_due().is_empty());
}

proptest::proptest! {
    /// Any bytes after a SCRAM record's type byte decode to a record or an error, never a
    /// panic; what decodes re-encodes to bytes that decode to the same record (varints need
    /// not be minimal on input).
    #[test]
    fn scram_record_bytes_never_panic(
        record_type in 11u8..=12,
        body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120),
    ) {
        let mut bytes = vec![record_type, 0];
        bytes.extend_from_slice(&body);
        if let Ok(r) = MetadataRecord::decode(&bytes) {
            proptest::prop_assert_eq!(MetadataRecord::decode(&r.encode()), Ok(r));
        }
    }
}
