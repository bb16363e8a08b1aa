use super::*;
use crate::llm::ToolCall;

/// `n` messages of every kind in turn, each text naming its place.
fn history(n: usize) -> Vec<ChatMessage> {
    (0..n)
        .map(|i| match i % 4 {
            0 => ChatMessage::user(format!("user {i}")),
            1 => ChatMessage::assistant(
                None,
                vec![ToolCall::function(format!("c{i}"), "ls", "{}")],
            ),
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
    let shared = Arc::new(flat[2..7].to_vec());
    split.extend_shared(&shared, 0..5);
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
    let shared = Arc::new(history(4));
    let mut one = Messages::new();
    one.extend_shared(&shared, 0..4);
    let other = one.clone();
    one[1] = ChatMessage::system("changed");
    one.push(ChatMessage::user("more"));
    assert_eq!(other, *shared);
    assert_eq!(one[1], ChatMessage::system("changed"));
    assert_eq!(one.len(), 5);
    one.truncate(2);
    assert_eq!(one.to_vec(), vec![shared[0].clone(), ChatMessage::system("changed")]);
    one.truncate(7);
    assert_eq!(one.len(), 2);
    one.truncate(0);
    assert!(one.is_empty());
    assert_eq!(other.len(), 4);
}

/// A log hands out its sealed segments (the same memory, not copies) and copies only its
/// open tail; from any start, what it hands out is its messages from there on.
#[test]
fn a_log_shares_what_it_sealed_and_copies_only_its_tail() {
    for n in [0, 1, SEAL_MESSAGES - 1, SEAL_MESSAGES, 3 * SEAL_MESSAGES + 5] {
        let flat = history(n);
        let log: MessageLog = flat.iter().cloned().collect();
        assert_eq!(log.len(), n);
        assert!(log.iter().eq(flat.iter()));
        for start in [0, 1, SEAL_MESSAGES + 1] {
            let start = start.min(n);
            let shared = log.shared_from(start);
            assert_eq!(shared, flat[start..].to_vec(), "n {n}, start {start}");
            let sealed = n / SEAL_MESSAGES * SEAL_MESSAGES;
            for (i, message) in shared.iter().enumerate() {
                let at = start + i;
                assert_eq!(
                    std::ptr::eq(message, &log[at]),
                    at < sealed,
                    "n {n}, message {at}"
                );
            }
        }
        assert_eq!(log.clone().into_vec(), flat);
    }
}

/// Large texts seal the tail sooner, so a request never copies much of them.
#[test]
fn large_texts_seal_the_tail_sooner() {
    let big = "x".repeat(SEAL_BYTES / 2);
    let log: MessageLog = (0..4).map(|_| ChatMessage::user(big.clone())).collect();
    let shared = log.shared_from(0);
    assert!(std::ptr::eq(&shared[1], &log[1]), "two halves seal a segment");
    assert!(std::ptr::eq(&shared[3], &log[3]));
}
