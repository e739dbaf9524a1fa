//! Released migrations never change. sqlx keeps a SHA-384 of each applied migration's whole text,
//! comments included, and refuses to start against a database whose copy differs: an edited
//! migration would stop every deployment that applied it. So each file's checksum is pinned
//! here. A new migration is added to the list; a correction is a new migration, never an edit.

use std::path::Path;

use sha2::{Digest, Sha384};

/// Every migration file, under `crates/lease/migrations/`, with the SHA-384 of its text.
const PINNED: &[(&str, &str)] = &[
    (
        "postgres/20261122000001_leases.sql",
        "39dce680e43378e55ceca3e311c2820b69b8e457adbada04bcb30d71a9aafe6f167529df0196ad3fad41ef641b7620ff",
    ),
    (
        "postgres/20261123000001_capabilities.sql",
        "181638ad9a3c78037240f71ddf9300110a576df67ea226bce31ded943a337c68fb2a9ca28e1c74e36dc3d38532e4aaf6",
    ),
    (
        "postgres/20261126000001_epochs_only_go_up.sql",
        "3e0b1107a8d28b9e0969b80668dca8f23f8eb9facfcb73dc390c25ab334abaae03b855480831e60b8feb069e0366d4c6",
    ),
    (
        "postgres/20261127000001_fence_function.sql",
        "23fc95ffdf201de5fa638f6c6454012f4397d05a507f13a60e456037ecec595c5d9f7764a38eea2827e159adf6b5199b",
    ),
    (
        "postgres/20261127500001_kv_usage.sql",
        "58f30d7a324d78b7b20f4f1cad35ef0003fb61852f55abbe65026c18abf08c81ace0590b7f5788ec66515bf4a2c9da97",
    ),
    (
        "postgres/20261128000001_incarnation.sql",
        "b8d17c8118c42472265f5c5f091df464fd8cb40af353128f5592a082c538a31774c75f39f69bad8414c79d747b1c47b9",
    ),
    (
        "postgres/20261129000001_cheaper_renewals.sql",
        "d1274483f943135e1a5e9f2b6b06aa719124368cc65b88e461d07e2ba382b87a0770c3dfbce75e25fd40cbeddeb62646",
    ),
    (
        "postgres/20261130000001_lease_groups.sql",
        "90b13608cb308d874780fac187c4a8e904a511908a5d44ed2d414a2a17749a884cc42e6ca32db191fc494854e5062b5d",
    ),
    (
        "postgres/20261201000001_terms.sql",
        "8d68989ad9f3cc79e2ab78d5644d9028c9079bca12a9f2a3c1a3bc684f188f1ba2359cb5e2d27a1164690054db5d9180",
    ),
    (
        "postgres/20261202000001_handoff.sql",
        "2b9616dacf6db2d2b89584ba463e78c62a922e4f04c86175fdf1005da83166050cb768122475fcfaa2790e081d25d86c",
    ),
    (
        "postgres/20261204000001_group_shard_counts.sql",
        "cb75ba998b74996ffb5db0bde1dc8ab39012e152c924ec89653388cd5976c73621d78891dca60b6389f1c0ef70a374db",
    ),
    (
        "postgres/20261205000001_process_fence.sql",
        "5556910a1f645d949efaea20cc56f61c088afd72377225eb8ce0ea5a5f2decfb13741e1c1fd9a50d58d03de5661f35ae",
    ),
    (
        "sqlite/20261122000001_leases.sql",
        "dd24877c437b4d1e6b0d63664d974028ac4b96d4fb8731ae586642bddb7e9f81d04854a1c4176caaee9e049e51167d57",
    ),
    (
        "sqlite/20261123000001_capabilities.sql",
        "c9cec0329bef49633a24bf4a30d494bdd95256d8714996475791d2eed081d353c66ee6aa2f09b5d645474dce1a6a2f04",
    ),
    (
        "sqlite/20261125000001_machine_clock.sql",
        "ef2a09d66c5cfd7fd8924794b8f96f23d320777771762ff2932e9ab188c136abbb648f80c042446901d1dbc4667ccff9",
    ),
    (
        "sqlite/20261126000001_epochs_only_go_up.sql",
        "fdbe66969f496f9bb260caa47555d9b8b41a393e906ff5e5fa1ed1006746e955cb2d2fd2076aa1fe5dbeb0cb41e00c1d",
    ),
    (
        "sqlite/20261127500001_kv_usage.sql",
        "5a07339da6a8b8e97761620be209706f50cd28bf21d76c1139dfe938530a8475e55a2e50cf9765525a00bc4f34d6af45",
    ),
    (
        "sqlite/20261130000001_lease_groups.sql",
        "0f2eab2b89fe27a010c9b89a0b229bc5f48b6c263918d40d4c1f7d756e76a4abf5a79116a838f61e8510a5a11df6a859",
    ),
    (
        "sqlite/20261201000001_terms.sql",
        "eb7a7e7218a955c0c4eb7513a809703fd25652dc044ade29a4f077804685e931fa19ccea3a1acabf408db2a02b5756d0",
    ),
    (
        "sqlite/20261202000001_handoff.sql",
        "f7fb87ead136eddb85e4ffe6217952efa186430e3b50c00535a2ae95492aa3af2c198a8fd71adab20e2b4048310b4b11",
    ),
    (
        "sqlite/20261204000001_group_shard_counts.sql",
        "cb75ba998b74996ffb5db0bde1dc8ab39012e152c924ec89653388cd5976c73621d78891dca60b6389f1c0ef70a374db",
    ),
    (
        "postgres/20261206000001_protocol.sql",
        "06c6d2c890c780090836ff8bee46c55f164c59571e73221b9558e50234c354bf1c03eaf83ddf603bd882ac001b9852b7",
    ),
    (
        "sqlite/20261206000001_protocol.sql",
        "1d1a2bde99d345cb27e6c44a36945f9e2a6a381f9f6b6a83c904f95d33f390fea3bdb40286577ecba9769ec4dfb691f6",
    ),
    (
        "postgres/20261207000001_process_fence_hardening.sql",
        "19e277878a9a1973240ab5cb7a934be8dd79177ba34940be355e6812941698c9a6c6b10e2e74d0a7aaebc34d28e2b230",
    ),
    (
        "postgres/20261207000002_protocol_function_grants.sql",
        "dce89807915178db4ebf34d94a7dcfa7eca8cebf8ed48e03526168b9ed7b9a2b28b57b147122920046236ad64d965806",
    ),
    (
        "postgres/20261208000001_line.sql",
        "30985d56267101b790e19cde295ee5ab3ab931c87135e7a0614846145297920454d67f564c01d6fa923def498a3798fa",
    ),
    (
        "sqlite/20261208000001_line.sql",
        "941d42fa6b6369b7df2e8ec7e2bc5c8c722ea3ba458966a0d6b01a4c639f3823b2181b81ad4a05e2691a1d446abc0419",
    ),
];

#[test]
fn released_migrations_are_never_edited_and_every_migration_is_pinned() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/lease/migrations");
    let mut found = Vec::new();
    for backend in ["postgres", "sqlite"] {
        for entry in std::fs::read_dir(root.join(backend)).expect("reading the migrations") {
            let path = entry.expect("reading the migrations").path();
            if path.extension().is_some_and(|e| e == "sql") {
                let name = format!("{backend}/{}", path.file_name().unwrap().to_string_lossy());
                let text = std::fs::read(&path).expect("reading a migration");
                found.push((name, hex(&Sha384::digest(&text))));
            }
        }
    }
    found.sort();
    for (name, sum) in &found {
        match PINNED.iter().find(|(pinned, _)| pinned == name) {
            None => panic!(
                "{name} is not pinned: add (\"{name}\", \"{sum}\") to PINNED in host/tests/migrations.rs"
            ),
            Some((_, pinned)) => assert_eq!(
                pinned, sum,
                "{name} was edited after its release: databases that applied it will refuse to start; undo the edit and write a new migration instead"
            ),
        }
    }
    for (pinned, _) in PINNED {
        assert!(
            found.iter().any(|(name, _)| name == pinned),
            "{pinned} is pinned but gone: a released migration is never removed"
        );
    }
}

/// Lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
