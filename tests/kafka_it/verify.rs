//! `kafka-mirrors --verify` through the real binaries (issue 25): it passes on a healthy mirror of
//! the acceptance shapes (every codec, committed and aborted transactions, a cleaned compacted
//! topic, a trimmed log start) and names the partition and offset of a record written straight to
//! a destination partition and of a skipped offset.

use std::time::Duration;

use bytes::Bytes;
use kafka_harness::{Compression, ProduceLine, ProduceOptions as JavaProduceOptions, ProducerRecord, destination, java_client, source, unique_name};
use kafka_mirror_proxy::client::{IsolationLevel, OffsetSpec, ProduceOptions, TxnMarker};
use kafka_mirror_proxy::protocol::batch::{BatchBuilder, Record};
use serde_json::Value;

use crate::binaries::{ProxyProcess, cli_async, cli_code_async, describe, properties_file};
use crate::common::{client, poll_until};
use crate::replicator::cleaned_compacted_topic;

/// `--verify … --json` (plus `extra`): the exit status and the rows.
async fn verify(proxy: &str, mirror: &str, extra: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let mut args = vec!["--bootstrap-server", proxy, "--verify", "--mirror", mirror, "--json"];
    args.extend_from_slice(extra);
    let (code, out, err) = cli_code_async(&args).await;
    let rows = match serde_json::from_str::<Value>(out.trim()) {
        Ok(Value::Array(rows)) => rows,
        _ => panic!("--verify --json printed no array: {out}\n{err}"),
    };
    (code, rows, err)
}

fn row<'a>(rows: &'a [Value], topic: &str, partition: i64) -> &'a Value {
    rows.iter().find(|r| r["topic"] == topic && r["partition"] == partition).unwrap_or_else(|| panic!("no row for {topic}-{partition}: {rows:?}"))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_passes_on_a_healthy_mirror_and_names_each_difference() {
    let (src, dst, java) = (source(), destination(), java_client());
    let prefix = unique_name("verify");
    let (codecs, txn, trimmed, skip) = (format!("{prefix}.codecs"), format!("{prefix}.txn"), format!("{prefix}.trimmed"), format!("{prefix}.skip"));
    let codec_count = Compression::ALL.len() as i32;
    java.create_topic(&src.bootstrap(), &codecs, codec_count, 1, &[]).unwrap();
    for t in [&txn, &trimmed, &skip] {
        java.create_topic(&src.bootstrap(), t, 2, 1, &[]).unwrap();
    }
    let record = |p: i32, i: usize| {
        let mut r = ProducerRecord::to(p).timestamp(now_ms() - 60_000 + i as i64).header("h", format!("{i}")).null_header("n");
        if i % 5 != 0 {
            r = r.key(format!("k{i}"));
        }
        if i % 7 != 3 {
            r = r.value(format!("v{i}-{}", "x".repeat(i * 37 % 400)));
        }
        r
    };
    for (p, codec) in Compression::ALL.into_iter().enumerate() {
        let options = JavaProduceOptions { compression: codec, idempotent: p % 2 == 0, linger_ms: Some(50), ..Default::default() };
        let lines: Vec<ProduceLine> = (0..80).map(|i| record(p as i32, i).into()).collect();
        java.produce(&src.bootstrap(), &codecs, &options, &lines).unwrap();
    }
    let tx = JavaProduceOptions { transactional_id: Some(format!("{prefix}-tx")), compression: Compression::Zstd, ..Default::default() };
    let mut lines = Vec::new();
    for (t, end) in [ProduceLine::Commit, ProduceLine::Abort, ProduceLine::Commit, ProduceLine::Abort].into_iter().enumerate() {
        lines.push(ProduceLine::Begin);
        lines.extend((0..6).map(|i| ProduceLine::from(record((i % 2) as i32, t * 10 + i))));
        lines.push(end);
    }
    java.produce(&src.bootstrap(), &txn, &tx, &lines).unwrap();
    java.produce(&src.bootstrap(), &txn, &JavaProduceOptions::default(), &(0..6).map(|i| record(i % 2, 100 + i as usize).into()).collect::<Vec<_>>()).unwrap();
    for t in [&trimmed, &skip] {
        let lines: Vec<ProduceLine> = (0..40).map(|i| record(i % 2, i as usize).into()).collect();
        java.produce(&src.bootstrap(), t, &JavaProduceOptions { linger_ms: Some(20), ..Default::default() }, &lines).unwrap();
    }
    assert_eq!(java.delete_records(&src.bootstrap(), &trimmed, 0, 7).unwrap(), 7);
    let compacted = cleaned_compacted_topic(java, src).await;

    let proxy_process = ProxyProcess::start(&dst.bootstrap(), &unique_name("__verify_state"), "");
    let proxy = proxy_process.bootstrap.clone();
    let config = properties_file(&format!("bootstrap.servers={}\n", src.bootstrap()));
    let mirror = unique_name("verified");
    let created = poll_until(Duration::from_secs(60), || async {
        let (ok, _, _) = cli_async(&["--bootstrap-server", &proxy, "--create", "--mirror", &mirror, "--mirror-config", &config]).await;
        ok.then_some(())
    })
    .await;
    assert!(created.is_some(), "kafka-mirrors --create");
    let patterns = format!("{}\\..*,{}", regex::escape(&prefix), regex::escape(&compacted));
    let (ok, _, err) = cli_async(&["--bootstrap-server", &proxy, "--add", "--mirror", &mirror, "--topic", &patterns]).await;
    assert!(ok, "{err}");
    let partitions = codec_count as usize + 3 * 2 + 1;
    let caught_up = poll_until(Duration::from_secs(120), || async {
        let rows = describe(&proxy, &mirror).await?;
        (rows.len() == partitions && rows.iter().all(|r| r["state"] == "MIRRORING" && r["lag"] == 0)).then_some(())
    })
    .await;
    assert!(caught_up.is_some(), "not MIRRORING with lag 0: {:?}", describe(&proxy, &mirror).await);

    // Healthy: every partition identical, with what each shape brings.
    let (code, rows, err) = verify(&proxy, &mirror, &[]).await;
    assert_eq!(code, Some(0), "--verify of a healthy mirror: {rows:?}\n{err}");
    assert_eq!(rows.len(), partitions);
    for r in &rows {
        assert_eq!(r["result"], "IDENTICAL", "{r}");
        assert!(r["records"].as_u64().unwrap() > 0, "nothing compared: {r}");
        assert_eq!(r["endOffset"], r["sourceEndOffset"], "checked up to the end: {r}");
    }
    assert_eq!(row(&rows, &trimmed, 0)["startOffset"], 7, "the range starts at the trimmed log start");
    let txn_markers: u64 = (0..2).map(|p| row(&rows, &txn, p)["markers"].as_u64().unwrap()).sum();
    assert_eq!(txn_markers, 8, "4 transactions over 2 partitions, a marker each");
    let txn_records: u64 = (0..2).map(|p| row(&rows, &txn, p)["records"].as_u64().unwrap()).sum();
    assert_eq!(txn_records, 24 + 6, "committed and aborted records are both compared");
    assert_eq!(row(&rows, &compacted, 0)["compacted"], true);
    // Throttled (a few times below the bytes read, so the pacer waits), the same ranges are checked
    // with the same outcome and digests.
    let read: u64 = rows.iter().map(|r| r["bytesRead"].as_u64().unwrap()).sum();
    let rate = (read / 4).max(1024).to_string();
    let (code, throttled, err) = verify(&proxy, &mirror, &["--throttle", &rate]).await;
    assert_eq!(code, Some(0), "--verify --throttle {rate}: {throttled:?}\n{err}");
    assert_eq!(throttled, rows, "--throttle {rate} ({read} bytes read) changed what was checked");
    // The table names the same.
    let pattern = format!("{}\\..*", regex::escape(&prefix));
    let (code, out, _) = cli_code_async(&["--bootstrap-server", &proxy, "--verify", "--mirror", &mirror, "--topic", &pattern]).await;
    assert_eq!(code, Some(0), "{out}");
    let header = out.lines().next().unwrap();
    assert!(header.starts_with("TOPIC") && header.contains("CHECKED") && header.contains("FIRST-DIFFERENCE"), "{out}");
    assert!(out.contains(&format!("Verified {} partition(s) of mirror {mirror}: {0} identical, 0 different, 0 not readable.", partitions - 1)), "{out}");

    // A record written straight to a destination partition (past the proxy's write policy).
    let dst_client = client(&dst.bootstrap()).await;
    let end = dst_client.list_offset(&codecs, 1, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap();
    let batch = BatchBuilder::new()
        .with_base_timestamp(now_ms())
        .with_max_timestamp(now_ms())
        .with_record(Record { key: Some(Bytes::from_static(b"intruder")), value: Some(Bytes::from_static(b"x")), ..Record::default() })
        .build()
        .unwrap();
    let produced = dst_client.produce(&codecs, 1, batch, &ProduceOptions::default()).await.unwrap();
    assert_eq!(produced.base_offset, end);
    // A skipped offset: with `skip` paused, the source gets a record the destination never does,
    // and the destination's offset is taken by an abort marker instead.
    let (ok, _, err) = cli_async(&["--bootstrap-server", &proxy, "--pause", "--mirror", &mirror, "--topic", &skip]).await;
    assert!(ok, "{err}");
    let paused = poll_until(Duration::from_secs(60), || async {
        let rows = describe(&proxy, &mirror).await?;
        rows.iter().filter(|r| r["topic"] == skip.as_str()).all(|r| r["state"] == "PAUSED").then_some(())
    })
    .await;
    assert!(paused.is_some(), "{skip} not PAUSED");
    let skipped_at = dst_client.list_offset(&skip, 0, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap();
    java.produce(&src.bootstrap(), &skip, &JavaProduceOptions::default(), &[record(0, 1000).into()]).unwrap();
    dst_client
        .write_txn_markers(&TxnMarker { producer_id: 4242, producer_epoch: 0, commit: false, coordinator_epoch: 0, topic: skip.clone(), partitions: vec![0] })
        .await
        .unwrap();

    let (code, rows, err) = verify(&proxy, &mirror, &[]).await;
    assert_eq!(code, Some(2), "--verify exits 2 on a difference: {rows:?}\n{err}");
    let intruded = row(&rows, &codecs, 1);
    assert_eq!((&intruded["result"], intruded["firstDifferingOffset"].as_i64()), (&Value::from("DIFFERENT"), Some(end)), "{intruded}");
    assert!(intruded["detail"].as_str().unwrap().contains("past the source's end"), "{intruded}");
    let skipped = row(&rows, &skip, 0);
    assert_eq!((&skipped["result"], skipped["firstDifferingOffset"].as_i64()), (&Value::from("DIFFERENT"), Some(skipped_at)), "{skipped}");
    assert!(skipped["detail"].as_str().unwrap().contains("skipped"), "{skipped}");
    let others: Vec<&Value> =
        rows.iter().filter(|r| !((r["topic"] == codecs.as_str() && r["partition"] == 1) || (r["topic"] == skip.as_str() && r["partition"] == 0))).collect();
    assert!(others.iter().all(|r| r["result"] == "IDENTICAL"), "the other partitions stay identical: {others:?}");

    // Bad input: one Error: line each.
    for (args, expected) in [
        (vec!["--verify"], "--verify needs --mirror"),
        (vec!["--verify", "--mirror", &mirror, "--topic", "("], "is not a valid regular expression"),
        (vec!["--verify", "--mirror", &mirror, "--throttle", "0"], "--throttle must be a positive number of bytes per second"),
        (vec!["--verify", "--mirror", &mirror, "--topic", "no-such-topic"], "no topic of mirror"),
        (vec!["--list", "--throttle", "10"], "--throttle is only used with --verify"),
    ] {
        let mut all = vec!["--bootstrap-server", proxy.as_str()];
        all.extend(args.iter().copied());
        let (ok, _, err) = cli_async(&all).await;
        assert!(!ok && err.starts_with("Error: ") && err.contains(expected) && err.lines().count() == 1, "{all:?}: {err}");
    }
    drop(proxy_process);
}
