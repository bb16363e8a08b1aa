//! A request's messages as shared, immutable segments ([`Messages`]), and the append-only
//! list a run's conversation is kept in between requests ([`MessageLog`]), which seals what
//! it holds into such segments as it grows.
//!
//! Why: every request carries the whole conversation. Copying it into each request (every
//! message's text cloned) made building the next request cost as much as the journal was
//! long (354.7 µs at 500 iterations against 8.4 µs at 10: BENCHMARKS.md, "Issue 32"). A
//! request now shares the sealed segments of the run's log, one reference count each, and
//! copies only the open tail (at most [`SEAL_MESSAGES`] messages or about [`SEAL_BYTES`]).
//!
//! A [`Messages`] reads as one list: iterated, indexed, compared, printed and serialized
//! exactly as a `Vec<ChatMessage>` (one flat JSON array), so the bytes sent do not change.
//!
//! Must not: know what the messages mean (the context builds them, the wire writes them), or
//! change a shared segment in place (another request may hold it: an edit copies it first).

use std::fmt;
use std::ops::{Index, IndexMut, Range};
use std::sync::Arc;

use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::types::ChatMessage;

/// Messages a [`MessageLog`]'s open tail holds before it is sealed into a shared segment.
pub const SEAL_MESSAGES: usize = 16;
/// Bytes of text that seal the open tail sooner: each request copies the tail, so a few
/// large tool results must not make that copy large.
pub const SEAL_BYTES: usize = 32 * 1024;

/// A run of messages of one shared allocation.
#[derive(Clone)]
struct Segment {
    shared: Arc<Vec<ChatMessage>>,
    range: Range<usize>,
}

impl Segment {
    fn whole(shared: Arc<Vec<ChatMessage>>) -> Segment {
        let range = 0..shared.len();
        Segment { shared, range }
    }

    fn as_slice(&self) -> &[ChatMessage] {
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

/// The messages of a [`Messages`] (or a [`MessageLog`]) in order.
#[derive(Clone)]
pub struct Iter<'a>(
    std::iter::FlatMap<
        std::slice::Iter<'a, Segment>,
        &'a [ChatMessage],
        fn(&'a Segment) -> &'a [ChatMessage],
    >,
);

impl<'a> Iter<'a> {
    fn of(segments: &'a [Segment]) -> Iter<'a> {
        Iter(segments.iter().flat_map(Segment::as_slice as fn(&'a Segment) -> &'a [ChatMessage]))
    }
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
        self.segments[segment].as_slice().get(offset)
    }

    /// The first message.
    pub fn first(&self) -> Option<&ChatMessage> {
        self.segments.first()?.as_slice().first()
    }

    /// The last message.
    pub fn last(&self) -> Option<&ChatMessage> {
        self.segments.last()?.as_slice().last()
    }

    /// Adds `message` at the end (in place when no other list shares the last segment).
    pub fn push(&mut self, message: ChatMessage) {
        if let Some(last) = self.segments.last_mut() {
            if last.range.end == last.shared.len() {
                if let Some(owned) = Arc::get_mut(&mut last.shared) {
                    owned.push(message);
                    last.range.end += 1;
                    self.len += 1;
                    return;
                }
            }
        }
        self.push_segment(Segment::whole(Arc::new(vec![message])));
    }

    /// Adds copies of `messages` at the end, as one segment of their own.
    pub fn extend_from_slice(&mut self, messages: &[ChatMessage]) {
        self.push_segment(Segment::whole(Arc::new(messages.to_vec())));
    }

    /// Adds `shared[range]` at the end without copying it.
    pub fn extend_shared(&mut self, shared: &Arc<Vec<ChatMessage>>, range: Range<usize>) {
        let end = range.end.min(shared.len());
        let start = range.start.min(end);
        self.push_segment(Segment {
            shared: Arc::clone(shared),
            range: start..end,
        });
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
                Ok(mut owned) => messages.extend(owned.drain(range)),
                Err(shared) => messages.extend_from_slice(&shared[range]),
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
        &mut Arc::make_mut(&mut segment.shared)[segment.range.start + offset]
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
        list.push_segment(Segment::whole(Arc::new(messages)));
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

/// An append-only list of messages (a run's conversation between requests): every
/// [`SEAL_MESSAGES`] messages (or [`SEAL_BYTES`] of text) the open tail is sealed into a
/// segment that [`MessageLog::shared_from`] hands to requests without copying.
#[derive(Clone, Default)]
pub struct MessageLog {
    sealed: Vec<Segment>,
    /// The index of the first message of each sealed segment.
    starts: Vec<usize>,
    sealed_len: usize,
    open: Vec<ChatMessage>,
    open_bytes: usize,
}

impl MessageLog {
    /// How many messages.
    pub fn len(&self) -> usize {
        self.sealed_len + self.open.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `message` at the end.
    pub fn push(&mut self, message: ChatMessage) {
        self.open_bytes += message.content.as_deref().map_or(0, str::len);
        self.open.push(message);
        if self.open.len() >= SEAL_MESSAGES || self.open_bytes >= SEAL_BYTES {
            let sealed = std::mem::replace(&mut self.open, Vec::with_capacity(SEAL_MESSAGES));
            self.starts.push(self.sealed_len);
            self.sealed_len += sealed.len();
            self.sealed.push(Segment::whole(Arc::new(sealed)));
            self.open_bytes = 0;
        }
    }

    /// The message at `index`.
    pub fn get(&self, index: usize) -> Option<&ChatMessage> {
        if index >= self.sealed_len {
            return self.open.get(index - self.sealed_len);
        }
        let segment = self
            .starts
            .partition_point(|start| *start <= index)
            .saturating_sub(1);
        self.sealed[segment]
            .as_slice()
            .get(index - self.starts[segment])
    }

    /// The messages in order.
    pub fn iter(&self) -> LogIter<'_> {
        Iter::of(&self.sealed).chain(self.open.iter())
    }

    /// The messages from `start` on, as a request's list: the sealed segments shared, the
    /// open tail copied.
    pub fn shared_from(&self, start: usize) -> Messages {
        let mut messages = Messages::new();
        for (segment, first) in self.sealed.iter().zip(&self.starts) {
            let skip = start.saturating_sub(*first);
            if skip < segment.len() {
                messages.extend_shared(&segment.shared, segment.range.start + skip..segment.range.end);
            }
        }
        let skip = start.saturating_sub(self.sealed_len).min(self.open.len());
        if skip < self.open.len() {
            messages.extend_from_slice(&self.open[skip..]);
        }
        messages
    }

    /// The messages, moved out of the segments no request still holds (the others copied).
    pub fn into_vec(self) -> Vec<ChatMessage> {
        let mut messages = Messages {
            segments: self.sealed,
            len: self.sealed_len,
        }
        .into_vec();
        messages.extend(self.open);
        messages
    }
}

/// The messages of a [`MessageLog`] in order.
pub type LogIter<'a> = std::iter::Chain<Iter<'a>, std::slice::Iter<'a, ChatMessage>>;

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
