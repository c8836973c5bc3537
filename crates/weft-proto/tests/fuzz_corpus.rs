//! Replays the committed cargo-fuzz seed corpora (`fuzz/corpus/<target>.tar.gz`)
//! through the same entry points the fuzz targets use, on stable, so CI
//! catches a parser that starts panicking on a known input. Also checks that
//! every target has a non-empty corpus.
//!
//! `WEFT_WRITE_CORPUS=1 cargo test -p weft-proto --test fuzz_corpus` (re)writes
//! the generated seeds into the unpacked corpora (`scripts/fuzz-corpus.sh
//! unpack`, then `pack` to commit them): real handshake transcripts between
//! two weft identities, CREATE2/relay cells of real circuits.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use weft_proto::cell::{cmd, encode_fixed, next_frame, BODY_LEN};
use weft_proto::fuzzing;
use weft_proto::link::Handshake;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

#[path = "../../../fuzz/corpus_archive.rs"]
mod corpus_archive;

fn each_seed(target: &str, mut f: impl FnMut(&[u8])) {
    for (_, data) in corpus_archive::inputs(target) {
        f(&data);
    }
}

/// Writes a seed into the unpacked corpus (`scripts/fuzz-corpus.sh pack`
/// puts it in the archive).
fn write_seed(target: &str, name: &str, data: &[u8]) {
    let dir = corpus_dir(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), data).unwrap();
    eprintln!(
        "wrote {}; `scripts/fuzz-corpus.sh pack {target}` to commit it",
        dir.join(name).display()
    );
}

/// Run a handshake pair in memory, returning what the initiator sent and
/// what the responder sent, as raw bytes.
fn transcripts() -> (Vec<u8>, Vec<u8>) {
    let (ta, tb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, _, _) = fuzzing::test_identity(ta.path());
    let (b, bkeys, b_tls) = fuzzing::test_identity(tb.path());
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let mut resp = Handshake::new_responder(b.clone(), ip, vec![ip]);
    let (mut init, v) = Handshake::new_initiator(a, ip, vec![ip], Some(bkeys.rsa_fp), None, b_tls);
    let mut from_init = v.clone();
    let mut from_resp = Vec::new();
    let mut exporter = |_: &[u8]| Some([7u8; 32]);
    let mut pending_to_resp = vec![v];
    for _ in 0..4 {
        let mut to_init = Vec::new();
        for c in pending_to_resp.drain(..) {
            let (f, _) = next_frame(&c, resp.circ_id_len()).unwrap().unwrap();
            let _ = resp.handle(f, SystemTime::now(), &mut exporter, &mut to_init);
        }
        for c in &to_init {
            from_resp.extend_from_slice(c);
        }
        for c in to_init {
            let (f, _) = next_frame(&c, init.circ_id_len()).unwrap().unwrap();
            let _ = init.handle(f, SystemTime::now(), &mut exporter, &mut pending_to_resp);
        }
        for c in &pending_to_resp {
            from_init.extend_from_slice(c);
        }
        if pending_to_resp.is_empty() {
            break;
        }
    }
    (from_init, from_resp)
}

#[test]
fn write_generated_seeds_when_asked() {
    if std::env::var_os("WEFT_WRITE_CORPUS").is_none() {
        return;
    }
    let (from_init, from_resp) = transcripts();
    write_seed("link_handshake", "initiator_transcript", &from_init);
    let mut init_seed = vec![0u8; 20];
    init_seed.extend_from_slice(&from_resp);
    write_seed("link_initiator", "responder_transcript", &init_seed);
    write_seed("cell_frame", "handshake_stream", &from_init);

    // circuit_half: a real ntor CREATE2 body, then RELAY_EARLY cells.
    let t = tempfile::tempdir().unwrap();
    let (_, keys, _) = fuzzing::test_identity(t.path());
    let (_, onion) = weft_crypto::ntor::client_start(
        &keys.rsa_fp,
        &keys.ntor[0].public,
        weft_crypto::random_array(),
    );
    let mut create2 = vec![0u8, 2, 0, 84];
    create2.extend_from_slice(&onion);
    create2.resize(BODY_LEN, 0);
    let mut seed = create2;
    for command in [1u8, 1, 0, 0] {
        seed.push(command);
        let mut body = [0u8; BODY_LEN];
        body[0] = 14; // EXTEND2
        body[10] = 100;
        seed.extend_from_slice(&body);
    }
    write_seed("circuit_half", "ntor_create2_then_cells", &seed);
    let cells: Vec<u8> = [cmd::CREATE_FAST, cmd::RELAY, cmd::DESTROY]
        .iter()
        .flat_map(|&c| encode_fixed(0x8000_0001, 4, c, &[1, 2, 3]))
        .collect();
    write_seed("cell_frame", "fixed_cells", &cells);

    // onion_cells: an ESTABLISH_INTRO C Tor made (Arti's tor-cell test
    // vector), an INTRODUCE1, a path-bias probe's BEGIN.
    let est = hex::decode(concat!(
        "02002075BC879BF697A9B12E1E10596FEF041127FECD11FDD80706AEAE35812EA74328",
        "00A3DF998D6749A9323035AD23DAA7F8607E4F87473A975E50A42DEC9C0E565C48",
        "00405A7F5E53D55B307B5F7866AE14508DDA3412E2B3E4805176C25413CEDF204F7F",
        "53EAECADC0844472AA7BEC3BDCBA0A65F1FCDEF397B399F534F46E535B0E6301"
    ))
    .unwrap();
    write_seed("onion_cells", "c_tor_establish_intro", &est);
    let mut intro1 = vec![0u8; 20];
    intro1.extend_from_slice(&[2, 0, 32]);
    intro1.extend_from_slice(&[7u8; 32]);
    intro1.extend_from_slice(&[0, 1, 2, 3]);
    write_seed("onion_cells", "introduce1", &intro1);
    write_seed("onion_cells", "path_bias_begin", b"0.1.2.3:25\0\0\0\0\x06");

    // recognized_cells: (command, flags, data) chunks of one circuit.
    let mut seed = Vec::new();
    for (command, flags, data) in [
        (33u8, 32u8, vec![5u8; 20]),        // ESTABLISH_RENDEZVOUS
        (1, 33, b"0.1.2.3:25\0".to_vec()),  // BEGIN
        (11, 1, b"example.com\0".to_vec()), // RESOLVE
        (34, 0, intro1.clone()),            // INTRODUCE1
        (32, 16, est.clone()),              // ESTABLISH_INTRO
        (8, 0, vec![3]),                    // TRUNCATE
    ] {
        let mut c = vec![command, flags];
        c.extend_from_slice(&data);
        c.resize(2 + weft_proto::relay::RELAY_DATA_MAX, 0);
        seed.extend_from_slice(&c);
    }
    write_seed("recognized_cells", "onion_and_edge_commands", &seed);
}

#[test]
fn cell_frame_corpus() {
    each_seed("cell_frame", fuzzing::cell_frames);
}

#[test]
fn conflux_set_corpus() {
    each_seed("conflux_set", fuzzing::conflux_set);
}

#[test]
fn relay_msgs_corpus() {
    each_seed("relay_msgs", fuzzing::relay_msgs);
}

#[test]
fn link_corpora() {
    let t = tempfile::tempdir().unwrap();
    let (id, _, tls) = fuzzing::test_identity(t.path());
    each_seed("link_handshake", |d| fuzzing::link_responder(&id, d));
    each_seed("link_initiator", |d| fuzzing::link_initiator(&id, &tls, d));
}

#[test]
fn onion_corpora() {
    each_seed("onion_cells", fuzzing::onion_cells);
    each_seed("recognized_cells", fuzzing::recognized_cells);
}

#[test]
fn circuit_half_corpus() {
    let t = tempfile::tempdir().unwrap();
    let (_, keys, _) = fuzzing::test_identity(t.path());
    each_seed("circuit_half", |d| fuzzing::circuit_half(&keys, d));
}
