//! A request's messages as shared, immutable segments ([`Messages`]), and the append-only
//! list a run's conversation is kept in between requests ([`MessageLog`]), whose chunks the
//! requests share as it grows.
//!
//! Why: every request carries the whole conversation. Copying it into each request (every
//! message's text cloned) made building the next request cost as much as the journal was
//! long (354.7 µs at 500 iterations against 8.4 µs at 10: BENCHMARKS.md, "Issue 32"). A
//! request now holds the log's chunks, one reference count per [`CHUNK_MESSAGES`] messages,
//! and copies none of them: a chunk's slots are written once, in order, and a request reads
//! only the slots that were written when it was made.
//!
//! A [`Messages`] reads as one list: iterated, indexed, compared, printed and serialized
//! exactly as a `Vec<ChatMessage>` (one flat JSON array), so the bytes sent do not change.
//!
//! Must not: know what the messages mean (the context builds them, the wire writes them), or
//! change a message another list holds (an edit copies the segment first).

use std::fmt;
use std::ops::{Index, IndexMut, Range};
use std::sync::{Arc, OnceLock};

use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::types::ChatMessage;

/// Messages of one chunk of a [`MessageLog`]: a request holds one reference per chunk.
pub const CHUNK_MESSAGES: usize = 32;

/// Messages in write-once slots: a chunk of a [`MessageLog`] is shared with requests while
/// the log still fills its later slots.
type Slots = Vec<OnceLock<ChatMessage>>;

/// A run of written slots of one shared allocation.
#[derive(Clone)]
struct Segment {
    shared: Arc<Slots>,
    /// Only written slots.
    range: Range<usize>,
}

impl Segment {
    fn owned(messages: Vec<ChatMessage>) -> Segment {
        let slots: Slots = messages.into_iter().map(OnceLock::from).collect();
        let range = 0..slots.len();
        Segment {
            shared: Arc::new(slots),
            range,
        }
    }

    fn slots(&self) -> &[OnceLock<ChatMessage>] {
        &self.shared[self.range.clone()]
    }

    fn len(&self) -> usize {
        self.range.len()
    }
}

/// A request's messages: segments shared with other requests (and with the run's
/// [`MessageLog`]), read as one list. Cloning it copies a reference per segment.
#[derive(Clone, Default)]
pub struct Messages {
    /// Never an empty one.
    segments: Vec<Segment>,
    len: usize,
}

type SlotIter<'a> = std::iter::FilterMap<
    std::slice::Iter<'a, OnceLock<ChatMessage>>,
    fn(&'a OnceLock<ChatMessage>) -> Option<&'a ChatMessage>,
>;

/// The messages of a [`Messages`] (or a [`MessageLog`]) in order.
#[derive(Clone)]
pub struct Iter<'a>(
    std::iter::FlatMap<std::slice::Iter<'a, Segment>, SlotIter<'a>, fn(&'a Segment) -> SlotIter<'a>>,
);

impl<'a> Iter<'a> {
    fn of(segments: &'a [Segment]) -> Iter<'a> {
        Iter(segments.iter().flat_map(segment_messages as fn(&'a Segment) -> SlotIter<'a>))
    }
}

/// A segment's messages (every slot of its range is written).
fn segment_messages(segment: &Segment) -> SlotIter<'_> {
    segment
        .slots()
        .iter()
        .filter_map(OnceLock::get as fn(&OnceLock<ChatMessage>) -> Option<&ChatMessage>)
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a ChatMessage;

    fn next(&mut self) -> Option<&'a ChatMessage> {
        self.0.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back()
    }
}

impl std::iter::FusedIterator for Iter<'_> {}

impl Messages {
    /// No messages.
    pub fn new() -> Messages {
        Messages::default()
    }

    /// How many messages.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The messages in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter::of(&self.segments)
    }

    /// The message at `index`.
    pub fn get(&self, index: usize) -> Option<&ChatMessage> {
        let (segment, offset) = self.locate(index)?;
        self.segments[segment].slots().get(offset)?.get()
    }

    /// The first message.
    pub fn first(&self) -> Option<&ChatMessage> {
        self.segments.first()?.slots().first()?.get()
    }

    /// The last message.
    pub fn last(&self) -> Option<&ChatMessage> {
        self.segments.last()?.slots().last()?.get()
    }

    /// Adds `message` at the end (in place when no other list shares the last segment).
    pub fn push(&mut self, message: ChatMessage) {
        if let Some(last) = self.segments.last_mut() {
            if last.range.end == last.shared.len() {
                if let Some(owned) = Arc::get_mut(&mut last.shared) {
                    owned.push(OnceLock::from(message));
                    last.range.end += 1;
                    self.len += 1;
                    return;
                }
            }
        }
        self.push_segment(Segment::owned(vec![message]));
    }

    /// Adds copies of `messages` at the end, as one segment of their own.
    pub fn extend_from_slice(&mut self, messages: &[ChatMessage]) {
        self.push_segment(Segment::owned(messages.to_vec()));
    }

    /// Moves `other`'s segments to the end (shared as they were).
    pub fn append(&mut self, other: Messages) {
        for segment in other.segments {
            self.push_segment(segment);
        }
    }

    /// Keeps the first `len` messages.
    pub fn truncate(&mut self, len: usize) {
        let Some((segment, offset)) = self.locate(len) else {
            return;
        };
        self.segments.truncate(segment + 1);
        if let Some(last) = self.segments.last_mut() {
            last.range.end = last.range.start + offset;
            if last.range.is_empty() {
                self.segments.pop();
            }
        }
        self.len = len;
    }

    /// Copies of the messages.
    pub fn to_vec(&self) -> Vec<ChatMessage> {
        self.iter().cloned().collect()
    }

    /// The messages, moved out of the segments no other list shares (the others copied).
    pub fn into_vec(self) -> Vec<ChatMessage> {
        let mut messages = Vec::with_capacity(self.len);
        for Segment { shared, range } in self.segments {
            match Arc::try_unwrap(shared) {
                Ok(mut owned) => {
                    messages.extend(owned.drain(range).filter_map(OnceLock::into_inner))
                }
                Err(shared) => {
                    messages.extend(shared[range].iter().filter_map(|slot| slot.get().cloned()))
                }
            }
        }
        messages
    }

    fn push_segment(&mut self, segment: Segment) {
        if segment.len() == 0 {
            return;
        }
        self.len += segment.len();
        self.segments.push(segment);
    }

    /// The segment holding `index`, and its place in it.
    fn locate(&self, index: usize) -> Option<(usize, usize)> {
        let mut offset = index;
        for (at, segment) in self.segments.iter().enumerate() {
            if offset < segment.len() {
                return Some((at, offset));
            }
            offset -= segment.len();
        }
        None
    }
}

impl Index<usize> for Messages {
    type Output = ChatMessage;

    /// Panics when `index` is out of range, as a `Vec`'s index does.
    fn index(&self, index: usize) -> &ChatMessage {
        match self.get(index) {
            Some(message) => message,
            None => panic!("message {index} of {} messages", self.len),
        }
    }
}

impl IndexMut<usize> for Messages {
    /// Copies the segment first when another list shares it.
    fn index_mut(&mut self, index: usize) -> &mut ChatMessage {
        let len = self.len;
        let Some((at, offset)) = self.locate(index) else {
            panic!("message {index} of {len} messages");
        };
        let segment = &mut self.segments[at];
        let slot = &mut Arc::make_mut(&mut segment.shared)[segment.range.start + offset];
        match slot.get_mut() {
            Some(message) => message,
            None => panic!("message {index} of {len} messages was never written"),
        }
    }
}

impl<'a> IntoIterator for &'a Messages {
    type Item = &'a ChatMessage;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl From<Vec<ChatMessage>> for Messages {
    fn from(messages: Vec<ChatMessage>) -> Messages {
        let mut list = Messages::new();
        list.push_segment(Segment::owned(messages));
        list
    }
}

impl FromIterator<ChatMessage> for Messages {
    fn from_iter<I: IntoIterator<Item = ChatMessage>>(messages: I) -> Messages {
        Messages::from(messages.into_iter().collect::<Vec<_>>())
    }
}

impl PartialEq for Messages {
    fn eq(&self, other: &Messages) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl PartialEq<Vec<ChatMessage>> for Messages {
    fn eq(&self, other: &Vec<ChatMessage>) -> bool {
        self.len == other.len() && self.iter().eq(other.iter())
    }
}

impl fmt::Debug for Messages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Messages {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.len))?;
        for message in self {
            seq.serialize_element(message)?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Messages, D::Error> {
        Vec::<ChatMessage>::deserialize(deserializer).map(Messages::from)
    }
}

/// An append-only list of messages (a run's conversation between requests), in chunks of
/// [`CHUNK_MESSAGES`] write-once slots: [`MessageLog::shared_from`] hands the chunks to a
/// request as they are, the slots written so far, while the log goes on filling the last one.
/// Only the log writes its chunks, each slot once and in order (a clone gets its own last
/// chunk), so what a request holds never changes.
#[derive(Default)]
pub struct MessageLog {
    /// Every chunk but the last is full.
    chunks: Vec<Arc<Slots>>,
    len: usize,
}

impl MessageLog {
    /// How many messages.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `message` at the end.
    pub fn push(&mut self, message: ChatMessage) {
        let offset = self.len % CHUNK_MESSAGES;
        if offset == 0 {
            self.chunks.push(Arc::new(empty_chunk()));
        }
        let Some(chunk) = self.chunks.last() else {
            return;
        };
        // The slot is empty: only this log writes its chunks, and `len` only grows.
        if chunk[offset].set(message).is_ok() {
            self.len += 1;
        }
    }

    /// The message at `index`.
    pub fn get(&self, index: usize) -> Option<&ChatMessage> {
        if index >= self.len {
            return None;
        }
        self.chunks
            .get(index / CHUNK_MESSAGES)?
            .get(index % CHUNK_MESSAGES)?
            .get()
    }

    /// The messages in order.
    pub fn iter(&self) -> LogIter<'_> {
        LogIter(
            self.chunks
                .iter()
                .flat_map(chunk_messages as fn(&Arc<Slots>) -> SlotIter<'_>),
        )
    }

    /// The messages from `start` on, as a request's list: the chunks shared, nothing copied.
    pub fn shared_from(&self, start: usize) -> Messages {
        self.segments(start)
    }

    fn segments(&self, start: usize) -> Messages {
        let mut messages = Messages::new();
        for (at, chunk) in self.chunks.iter().enumerate() {
            let first = at * CHUNK_MESSAGES;
            let end = (self.len - first).min(CHUNK_MESSAGES);
            let skip = start.saturating_sub(first).min(end);
            messages.push_segment(Segment {
                shared: Arc::clone(chunk),
                range: skip..end,
            });
        }
        messages
    }

    /// The messages, moved out of the chunks no request still holds (the others copied).
    pub fn into_vec(self) -> Vec<ChatMessage> {
        self.segments(0).into_vec()
    }
}

fn empty_chunk() -> Slots {
    (0..CHUNK_MESSAGES).map(|_| OnceLock::new()).collect()
}

impl Clone for MessageLog {
    /// Shares the full chunks; the last one, still being written, is copied.
    fn clone(&self) -> MessageLog {
        let mut chunks = self.chunks.clone();
        if let Some(last) = chunks.last_mut() {
            if self.len % CHUNK_MESSAGES != 0 {
                let copy: Slots = last
                    .iter()
                    .map(|slot| slot.get().cloned().map_or_else(OnceLock::new, OnceLock::from))
                    .collect();
                *last = Arc::new(copy);
            }
        }
        MessageLog {
            chunks,
            len: self.len,
        }
    }
}

/// The messages of a [`MessageLog`] in order.
#[derive(Clone)]
pub struct LogIter<'a>(
    std::iter::FlatMap<
        std::slice::Iter<'a, Arc<Slots>>,
        SlotIter<'a>,
        fn(&'a Arc<Slots>) -> SlotIter<'a>,
    >,
);

/// A chunk's written messages (its unwritten slots are all after them).
fn chunk_messages(chunk: &Arc<Slots>) -> SlotIter<'_> {
    chunk
        .iter()
        .filter_map(OnceLock::get as fn(&OnceLock<ChatMessage>) -> Option<&ChatMessage>)
}

impl<'a> Iterator for LogIter<'a> {
    type Item = &'a ChatMessage;

    fn next(&mut self) -> Option<&'a ChatMessage> {
        self.0.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for LogIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back()
    }
}

impl<'a> IntoIterator for &'a MessageLog {
    type Item = &'a ChatMessage;
    type IntoIter = LogIter<'a>;

    fn into_iter(self) -> LogIter<'a> {
        self.iter()
    }
}

impl FromIterator<ChatMessage> for MessageLog {
    fn from_iter<I: IntoIterator<Item = ChatMessage>>(messages: I) -> MessageLog {
        let mut log = MessageLog::default();
        for message in messages {
            log.push(message);
        }
        log
    }
}

impl Index<usize> for MessageLog {
    type Output = ChatMessage;

    /// Panics when `index` is out of range, as a `Vec`'s index does.
    fn index(&self, index: usize) -> &ChatMessage {
        match self.get(index) {
            Some(message) => message,
            None => panic!("message {index} of {} messages", self.len()),
        }
    }
}

impl PartialEq for MessageLog {
    fn eq(&self, other: &MessageLog) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl fmt::Debug for MessageLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
