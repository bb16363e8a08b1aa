use super::*;
use crate::llm::{ChatMessage, MessageLog, Messages, ToolCall};

/// `n` messages of every kind in turn, each text naming its place.
fn history(n: usize) -> Vec<ChatMessage> {
    (0..n)
        .map(|i| match i % 4 {
            0 => ChatMessage::user(format!("user {i}")),
            1 => {
                ChatMessage::assistant(None, vec![ToolCall::function(format!("c{i}"), "ls", "{}")])
            }
            2 => ChatMessage::tool(format!("c{}", i - 1), format!("result {i}")),
            _ => ChatMessage::assistant(Some(format!("text {i}")), vec![]),
        })
        .collect()
}

/// Any split into segments reads, compares, prints and serializes as the flat list: the
/// bytes sent do not depend on how a request's messages are shared.
#[test]
fn segments_read_as_one_flat_list() {
    let flat = history(9);
    let mut split = Messages::from(flat[..2].to_vec());
    let log: MessageLog = flat[1..7].iter().cloned().collect();
    split.append(log.shared_from(1));
    split.extend_from_slice(&[]);
    split.push(flat[7].clone());
    split.push(flat[8].clone());
    assert_eq!(split.len(), 9);
    assert_eq!(split, flat);
    assert_eq!(split, Messages::from(flat.clone()));
    assert_eq!(
        serde_json::to_string(&split).unwrap(),
        serde_json::to_string(&flat).unwrap()
    );
    assert_eq!(format!("{split:?}"), format!("{flat:?}"));
    for (i, message) in flat.iter().enumerate() {
        assert_eq!(&split[i], message);
        assert_eq!(split.get(i), Some(message));
    }
    assert_eq!(split.get(9), None);
    assert_eq!(split.first(), flat.first());
    assert_eq!(split.last(), flat.last());
    assert!(split.iter().rev().eq(flat.iter().rev()));
    let back: Messages = serde_json::from_str(&serde_json::to_string(&flat).unwrap()).unwrap();
    assert_eq!(back, flat);
    assert_eq!(split.clone().into_vec(), flat);
}

/// An edit never shows through another list sharing the segment: it is copied first.
#[test]
fn editing_a_shared_segment_copies_it() {
    let shared = history(4);
    let log: MessageLog = shared.iter().cloned().collect();
    let mut one = log.shared_from(0);
    let other = one.clone();
    one[1] = ChatMessage::system("changed");
    one.push(ChatMessage::user("more"));
    assert_eq!(other, shared);
    assert!(log.iter().eq(shared.iter()));
    assert_eq!(one[1], ChatMessage::system("changed"));
    assert_eq!(one.len(), 5);
    one.truncate(2);
    assert_eq!(
        one.to_vec(),
        vec![shared[0].clone(), ChatMessage::system("changed")]
    );
    one.truncate(7);
    assert_eq!(one.len(), 2);
    one.truncate(0);
    assert!(one.is_empty());
    assert_eq!(other.len(), 4);
}

/// A log hands out its chunks (the same memory, not copies), the one it is still writing
/// included, and what a request holds does not change as the log grows; from any start,
/// what it hands out is its messages from there on.
#[test]
fn a_log_shares_its_messages_and_copies_none() {
    for n in [
        0,
        1,
        FIRST_CHUNK_LEN - 1,
        FIRST_CHUNK_LEN,
        3 * FIRST_CHUNK_LEN,
        2500,
    ] {
        let flat = history(n + 3);
        let mut log: MessageLog = flat[..n].iter().cloned().collect();
        assert_eq!(log.len(), n);
        assert!(log.iter().eq(flat[..n].iter()));
        assert!(log.iter().rev().eq(flat[..n].iter().rev()));
        for start in [0, 1, FIRST_CHUNK_LEN + 1, 1000] {
            let start = start.min(n);
            let shared = log.shared_from(start);
            assert_eq!(shared, flat[start..n].to_vec(), "n {n}, start {start}");
            for (i, message) in shared.iter().enumerate() {
                assert!(std::ptr::eq(message, &log[start + i]), "n {n}, message {i}");
            }
        }
        // A reference per chunk, and the chunks grow: 32 + 64 + ... + 512 + 1024 + 1024
        // hold 2,500 in 7.
        if n == 2500 {
            assert_eq!(log.shared_from(0).segments.len(), 7);
        }
        let before = log.shared_from(0);
        let copy = log.clone();
        for message in &flat[n..] {
            log.push(message.clone());
        }
        assert_eq!(
            before,
            flat[..n].to_vec(),
            "a request does not grow with the log"
        );
        assert_eq!(log.shared_from(0), flat, "n {n}");
        assert_eq!(copy.len(), n, "a clone is not written by the log");
        assert_eq!(copy.clone().into_vec(), flat[..n].to_vec());
        drop(before);
        assert_eq!(log.into_vec(), flat);
    }
}
