use super::*;

fn small() -> WalConfig {
    WalConfig {
        segment_bytes: MIN_SEGMENT_BYTES,
    }
}

fn entry(group: u32, index: u64) -> Vec<u8> {
    format!("group {group} entry {index}").into_bytes()
}

fn append_range(wal: &Wal, group: u32, range: std::ops::Range<u64>) -> Position {
    wal.append(group, range.map(|i| (i, entry(group, i))))
        .expect("append")
}

fn read_all(wal: &Wal, group: u32) -> Vec<(u64, Vec<u8>)> {
    wal.read(group, 0, u64::MAX).expect("read")
}

fn expected(group: u32, range: std::ops::Range<u64>) -> Vec<(u64, Vec<u8>)> {
    range.map(|i| (i, entry(group, i))).collect()
}

/// A log in a new temporary directory, with `groups` registered.
fn open_new(cfg: WalConfig, groups: &[u32]) -> (tempfile::TempDir, Wal) {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = Wal::open(dir.path(), cfg).expect("open");
    for &g in groups {
        wal.register(g).expect("register");
    }
    (dir, wal)
}

/// Open the log in `dir`, waiting while a dropped log's sync thread still holds the
/// directory's lock (it lets go as it ends).
fn open_when_free(dir: &Path, cfg: WalConfig) -> io::Result<Wal> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match Wal::open(dir, cfg.clone()) {
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// Drop every handle and open the directory again, as a restarted node does.
fn reopen(wal: Wal, dir: &Path, cfg: WalConfig) -> Wal {
    drop(wal);
    open_when_free(dir, cfg).expect("reopen")
}

/// Wait until all that was written is on disk, then [`reopen`].
async fn sync_and_reopen(wal: Wal, dir: &Path, cfg: WalConfig) -> Wal {
    wal.sync(wal.position()).await.expect("sync");
    reopen(wal, dir, cfg)
}

#[tokio::test]
async fn what_was_written_reads_back_and_survives_a_reopen() {
    let (dir, wal) = open_new(WalConfig::default(), &[3, 9]);
    append_range(&wal, 3, 0..10);
    append_range(&wal, 9, 5..8);
    wal.set_meta(3, MetaKey::Vote, b"vote-1").expect("meta");
    wal.set_meta(3, MetaKey::Vote, b"vote-2").expect("meta");
    let end = wal.set_meta(9, MetaKey::Committed, b"c").expect("meta");
    wal.sync(end).await.expect("sync");

    let check = |wal: &Wal| {
        assert_eq!(wal.groups(), vec![3, 9]);
        assert_eq!(read_all(wal, 3), expected(3, 0..10));
        assert_eq!(read_all(wal, 9), expected(9, 5..8));
        assert_eq!(wal.read(3, 4, 6).expect("read"), expected(3, 4..6));
        assert_eq!(wal.bounds(3), Some((0, 9)));
        assert_eq!(wal.bounds(9), Some((5, 7)));
        assert_eq!(wal.meta(3, MetaKey::Vote).as_deref(), Some(&b"vote-2"[..]));
        assert_eq!(wal.meta(3, MetaKey::Committed), None);
        assert_eq!(wal.meta(9, MetaKey::Committed).as_deref(), Some(&b"c"[..]));
    };
    check(&wal);
    let wal = reopen(wal, dir.path(), WalConfig::default());
    check(&wal);
}

#[tokio::test]
async fn truncate_and_purge_shape_the_log_and_replay_the_same() {
    let (dir, wal) = open_new(WalConfig::default(), &[1]);
    append_range(&wal, 1, 1..20);
    wal.truncate(1, 15).expect("truncate");
    // Rewritten after the truncation, with other bytes.
    wal.append(1, (15..18).map(|i| (i, b"new".to_vec())))
        .expect("append");
    wal.purge(1, 4, b"id-4").expect("purge");
    wal.sync(wal.position()).await.expect("sync");

    let check = |wal: &Wal| {
        let got = read_all(wal, 1);
        assert_eq!(got.len(), 13, "5..=17");
        assert_eq!(got[0], (5, entry(1, 5)));
        assert_eq!(got[9], (14, entry(1, 14)));
        assert_eq!(got[10], (15, b"new".to_vec()));
        assert_eq!(got[12].0, 17);
        assert_eq!(wal.purged(1), Some((4, b"id-4".to_vec())));
        assert_eq!(wal.bounds(1), Some((5, 17)));
    };
    check(&wal);
    let wal = reopen(wal, dir.path(), WalConfig::default());
    check(&wal);

    // A purge past the last entry empties the log; the next entry follows the purged one.
    wal.purge(1, 100, b"id-100").expect("purge");
    assert_eq!(wal.bounds(1), None);
    assert!(wal.append(1, [(17, b"x")]).is_err());
    append_range(&wal, 1, 101..103);
    let wal = sync_and_reopen(wal, dir.path(), WalConfig::default()).await;
    assert_eq!(read_all(&wal, 1), expected(1, 101..103));
}

#[tokio::test]
async fn a_hole_or_an_unknown_group_is_refused_and_changes_nothing() {
    let (_dir, wal) = open_new(WalConfig::default(), &[1]);
    append_range(&wal, 1, 0..3);
    let before = wal.position();
    let gap = wal.append(1, [(5, b"x".to_vec())]).expect_err("a hole");
    assert_eq!(gap.kind(), io::ErrorKind::InvalidInput);
    // A batch that goes wrong halfway writes none of it.
    let halfway = wal
        .append(1, [(3, b"a".to_vec()), (9, b"b".to_vec())])
        .expect_err("a hole inside the batch");
    assert_eq!(halfway.kind(), io::ErrorKind::InvalidInput);
    let unknown = wal.append(2, [(0, b"x".to_vec())]).expect_err("unknown");
    assert_eq!(unknown.kind(), io::ErrorKind::NotFound);
    assert_eq!(wal.position(), before);
    assert_eq!(read_all(&wal, 1), expected(1, 0..3));
    // The log still works.
    append_range(&wal, 1, 3..4);
    assert_eq!(read_all(&wal, 1), expected(1, 0..4));
}

#[tokio::test]
async fn a_write_cut_short_at_the_end_is_dropped_at_open() {
    let (dir, wal) = open_new(WalConfig::default(), &[1]);
    let end = append_range(&wal, 1, 0..5);
    wal.sync(end).await.expect("sync");
    drop(wal);

    // What a crash in the middle of a write leaves: part of a record.
    let path = segment_path(dir.path(), 1);
    let mut bytes = std::fs::read(&path).expect("read");
    let whole = bytes.len();
    let mut record = Vec::new();
    Record::Entry {
        group: 1,
        index: 5,
        data: b"lost",
    }
    .encode(&mut record)
    .expect("encode");
    bytes.extend_from_slice(&record[..record.len() - 2]);
    std::fs::write(&path, &bytes).expect("write");

    let wal = open_when_free(dir.path(), WalConfig::default()).expect("open");
    assert_eq!(read_all(&wal, 1), expected(1, 0..5));
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), whole as u64);
    // Appends go on where the whole records end.
    let end = append_range(&wal, 1, 5..7);
    wal.sync(end).await.expect("sync");
    let wal = reopen(wal, dir.path(), WalConfig::default());
    assert_eq!(read_all(&wal, 1), expected(1, 0..7));
}

#[tokio::test]
async fn a_damaged_record_before_the_end_fails_the_open() {
    let (dir, wal) = open_new(small(), &[1]);
    // Enough to fill the first segment and start a second (a segment rolls between writes).
    let mut end = Position(0);
    for i in 0..400 {
        end = append_range(&wal, 1, i..i + 1);
    }
    wal.sync(end).await.expect("sync");
    assert!(wal.segment_count() >= 2);
    drop(wal);

    let path = segment_path(dir.path(), 1);
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[40] ^= 0xff;
    std::fs::write(&path, &bytes).expect("write");
    let err = open_when_free(dir.path(), small())
        .expect_err("a corrupt segment before the end must not open");
    assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
}

#[tokio::test]
async fn dead_segments_are_deleted_and_the_checkpoint_keeps_what_they_held() {
    let (dir, wal) = open_new(small(), &[1, 2]);
    wal.set_meta(2, MetaKey::Vote, b"vote of 2").expect("meta");
    wal.purge(2, 6, b"purged 2").expect("purge");
    // Group 1 writes many segments; group 2 wrote its values only at the start.
    let mut end = Position(0);
    for i in 0..2000 {
        end = append_range(&wal, 1, i..i + 1);
    }
    wal.sync(end).await.expect("sync");
    let segments = wal.segment_count();
    assert!(segments > 5, "{segments} segments");

    // Purge all but the last few entries: the segments before them die.
    wal.purge(1, 1990, b"purged 1").expect("purge");
    wal.sync(wal.position()).await.expect("sync");
    // The deletion happens after the sync that made the purge durable; one more sync request
    // runs after it.
    wal.register(3).expect("register");
    wal.sync(wal.position()).await.expect("sync");
    let left = wal.segment_count();
    assert!(left < segments, "{left} of {segments} segments left");
    let files = std::fs::read_dir(dir.path())
        .expect("ls")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".wal"))
        })
        .count();
    assert_eq!(files, left);

    let wal = reopen(wal, dir.path(), small());
    assert_eq!(wal.groups(), vec![1, 2, 3]);
    assert_eq!(read_all(&wal, 1), expected(1, 1991..2000));
    assert_eq!(wal.purged(1), Some((1990, b"purged 1".to_vec())));
    assert_eq!(
        wal.meta(2, MetaKey::Vote).as_deref(),
        Some(&b"vote of 2"[..])
    );
    assert_eq!(wal.purged(2), Some((6, b"purged 2".to_vec())));
}

#[tokio::test]
async fn a_dropped_group_is_gone_after_a_reopen_and_can_start_again() {
    let (dir, wal) = open_new(WalConfig::default(), &[4]);
    append_range(&wal, 4, 0..3);
    wal.set_meta(4, MetaKey::Vote, b"v").expect("meta");
    wal.drop_group(4).expect("drop");
    assert!(!wal.contains(4));
    let wal = sync_and_reopen(wal, dir.path(), WalConfig::default()).await;
    assert!(wal.groups().is_empty());
    wal.register(4).expect("register");
    assert_eq!(wal.meta(4, MetaKey::Vote), None);
    append_range(&wal, 4, 10..12);
    let wal = sync_and_reopen(wal, dir.path(), WalConfig::default()).await;
    assert_eq!(read_all(&wal, 4), expected(4, 10..12));
}

#[tokio::test]
async fn a_second_open_of_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _wal = Wal::open(dir.path(), WalConfig::default()).expect("open");
    let err = Wal::open(dir.path(), WalConfig::default()).expect_err("second open");
    assert!(err.to_string().contains("in use"), "{err}");
}

#[test]
fn a_segment_size_out_of_range_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    for bytes in [0, MIN_SEGMENT_BYTES - 1, MAX_SEGMENT_BYTES + 1] {
        let err = Wal::open(
            dir.path(),
            WalConfig {
                segment_bytes: bytes,
            },
        )
        .expect_err("refused");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
    assert!(std::fs::read_dir(dir.path()).expect("ls").next().is_none());
}

#[tokio::test]
async fn concurrent_appends_of_many_groups_share_syncs_and_all_become_durable() {
    let groups = 16u32;
    let (dir, wal) = open_new(WalConfig::default(), &(0..groups).collect::<Vec<_>>());
    let mut tasks = Vec::new();
    for g in 0..groups {
        let wal = wal.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..50u64 {
                let end = wal.append(g, [(i, entry(g, i))]).expect("append");
                wal.sync(end).await.expect("sync");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let wal = reopen(wal, dir.path(), WalConfig::default());
    for g in 0..groups {
        assert_eq!(read_all(&wal, g), expected(g, 0..50));
    }
}

/// A segment is deleted when it holds no live entry, even while an older one must stay (an
/// idle group's entries are in it); what the deleted segment's records did (a truncation, a
/// dropped group) still holds after a reopen that replays the older segment first.
#[tokio::test]
async fn an_idle_group_keeps_only_its_own_segment_and_deleted_records_still_count() {
    let (dir, wal) = open_new(small(), &[1, 2, 3, 4]);
    // Segment 1: the idle group 1, and groups 3 and 4.
    append_range(&wal, 1, 0..4);
    append_range(&wal, 3, 0..6);
    append_range(&wal, 4, 0..3);
    // Group 2 fills segment 1 and starts segment 2, where 3 is truncated and 4 dropped.
    let mut next = 0;
    while wal.segment_count() < 2 {
        append_range(&wal, 2, next..next + 1);
        next += 1;
    }
    wal.truncate(3, 2).expect("truncate");
    wal.drop_group(4).expect("drop");
    // Group 2 writes many more segments, then purges all but its last entries.
    while wal.segment_count() < 12 {
        append_range(&wal, 2, next..next + 1);
        next += 1;
    }
    let created = wal.segment_count();
    wal.purge(2, next - 3, b"p").expect("purge");
    wal.sync(wal.position()).await.expect("sync");
    wal.register(5).expect("register");
    wal.sync(wal.position()).await.expect("sync");

    let left = wal.segment_count();
    assert!(left <= 3, "{left} of {created} segments left");
    assert!(
        segment_path(dir.path(), 1).exists(),
        "the idle group's segment stays"
    );
    assert!(
        !segment_path(dir.path(), 2).exists(),
        "the segment of the truncation and the drop went"
    );

    let wal = reopen(wal, dir.path(), small());
    assert_eq!(wal.groups(), vec![1, 2, 3, 5]);
    assert_eq!(read_all(&wal, 1), expected(1, 0..4));
    assert_eq!(read_all(&wal, 3), expected(3, 0..2));
    assert_eq!(read_all(&wal, 2), expected(2, next - 2..next));
    // Group 3 goes on from where the truncation left it.
    append_range(&wal, 3, 2..3);
    let wal = sync_and_reopen(wal, dir.path(), small()).await;
    assert_eq!(read_all(&wal, 3), expected(3, 0..3));
}

/// A log that starts past its purged index (entries before it never written here) keeps its
/// first index through a purge that reaches only up to before it.
#[tokio::test]
async fn a_purge_short_of_the_first_entry_keeps_the_log_where_it_starts() {
    let (dir, wal) = open_new(WalConfig::default(), &[1]);
    append_range(&wal, 1, 5..8);
    wal.purge(1, 2, b"p2").expect("purge");
    assert_eq!(wal.bounds(1), Some((5, 7)));
    assert_eq!(read_all(&wal, 1), expected(1, 5..8));
    append_range(&wal, 1, 8..9);
    let wal = sync_and_reopen(wal, dir.path(), WalConfig::default()).await;
    assert_eq!(read_all(&wal, 1), expected(1, 5..9));
    assert_eq!(wal.purged(1), Some((2, b"p2".to_vec())));
}

fn wal_files(dir: &Path) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .expect("ls")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".wal"))
        .map(|e| {
            let len = e.metadata().expect("metadata").len();
            (e.file_name().to_string_lossy().into_owned(), len)
        })
        .collect();
    files.sort();
    files
}

/// Wait until the log has `n` segments (the sync thread deletes dead ones on its own).
async fn until_segments(wal: &Wal, n: usize) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while wal.segment_count() != n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} segments, expected {n}",
            wal.segment_count()
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Once every group has let go of its entries, the log keeps one segment holding a checkpoint:
/// the closed segments go, and so does the active one, which is closed early because nothing
/// in it lives. No other write is needed for that; what the groups hold stays after a reopen.
#[tokio::test]
async fn a_log_whose_entries_are_all_purged_shrinks_to_a_checkpoint_on_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = WalConfig {
        segment_bytes: 4 * IDLE_ROLL_MIN_BYTES,
    };
    let wal = Wal::open(dir.path(), cfg.clone()).expect("open");
    for g in [1, 2] {
        wal.register(g).expect("register");
        wal.set_meta(g, MetaKey::Vote, format!("vote of {g}").as_bytes())
            .expect("meta");
    }
    let big = |g: u32, i: u64| vec![g as u8; 1000 + i as usize % 7];
    // Several segments, the active one holding well over what closes it early when idle.
    let mut next = 0;
    let active_len = || wal_files(dir.path()).last().map_or(0, |(_, len)| *len);
    while wal.segment_count() < 3 || active_len() < 2 * IDLE_ROLL_MIN_BYTES {
        for g in [1, 2] {
            wal.append(g, [(next, big(g, next))]).expect("append");
        }
        next += 1;
    }
    wal.sync(wal.position()).await.expect("sync");
    let segments = wal.segment_count();
    let written: u64 = wal_files(dir.path()).iter().map(|(_, len)| len).sum();

    // Group 1 lets go of everything: segments holding group 2's entries stay.
    wal.purge(1, next - 1, b"p1").expect("purge");
    wal.sync(wal.position()).await.expect("sync");
    assert_eq!(wal.segment_count(), segments);
    // Group 2 too: every segment but a fresh active one goes, without another request.
    wal.purge(2, next - 1, b"p2").expect("purge");
    until_segments(&wal, 1).await;
    let files = wal_files(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0].1 < 1024,
        "the last segment holds {} of {written} bytes",
        files[0].1
    );

    let wal = reopen(wal, dir.path(), cfg.clone());
    for g in [1, 2] {
        assert_eq!(wal.bounds(g), None);
        assert_eq!(
            wal.purged(g),
            Some((next - 1, format!("p{g}").into_bytes()))
        );
        assert_eq!(
            wal.meta(g, MetaKey::Vote),
            Some(format!("vote of {g}").into_bytes())
        );
    }
    // The logs go on after their purged index, and an empty active segment is not rolled.
    wal.append(1, [(next, big(1, next))]).expect("append");
    wal.purge(1, next, b"p1 again").expect("purge");
    wal.sync(wal.position()).await.expect("sync");
    assert_eq!(wal.segment_count(), 1);
    let wal = reopen(wal, dir.path(), cfg);
    assert_eq!(wal.purged(1), Some((next, b"p1 again".to_vec())));
}

/// What a group's entries keep on disk: every closed segment they lie in, whole, and their own
/// bytes in the active one.
#[tokio::test]
async fn held_bytes_counts_closed_segments_whole_and_the_active_one_by_entry() {
    let (dir, wal) = open_new(small(), &[1, 2]);
    assert_eq!(wal.held_bytes(1, 0), 0);
    assert_eq!(wal.held_bytes(9, 0), 0);
    // Entry 0 of group 1 in segment 1, which group 2 then fills.
    append_range(&wal, 1, 0..1);
    let mut next = 0;
    while wal.segment_count() < 2 {
        append_range(&wal, 2, next..next + 1);
        next += 1;
    }
    // Entries 1 and 2 of group 1 in the active segment 2.
    append_range(&wal, 1, 1..3);
    let first_len = wal_files(dir.path())[0].1;
    let own = (entry(1, 1).len() + entry(1, 2).len()) as u64;
    assert_eq!(wal.held_bytes(1, 0), first_len + own);
    assert_eq!(wal.held_bytes(1, 1), own);
    assert_eq!(wal.held_bytes(1, 2), entry(1, 2).len() as u64);
    assert_eq!(wal.held_bytes(1, 3), 0);
    wal.purge(1, 0, b"p").expect("purge");
    assert_eq!(wal.held_bytes(1, 0), own);
}
