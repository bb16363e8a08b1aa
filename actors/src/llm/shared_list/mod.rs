//! A list read as one but made of shared, immutable segments ([`SharedList`]), and the
//! append-only list whose chunks it shares as it grows ([`ChunkLog`]). A request's messages
//! are a `SharedList<ChatMessage>` ([`super::Messages`]); a run's conversation between
//! requests is a `ChunkLog<ChatMessage>` ([`super::MessageLog`]).
//!
//! Why: every request carries the whole conversation. Copying it into each request (every
//! message's text cloned) made building the next request cost as much as the journal was
//! long (354.7 µs at 500 iterations against 8.4 µs at 10: BENCHMARKS.md, "Issue 32"). A
//! request now holds the log's chunks, one reference count each (chunks grow from
//! [`FIRST_CHUNK_LEN`] to [`MAX_CHUNK_LEN`] messages: 6 for a 500-iteration run), and copies
//! none of their messages: a chunk's slots are written once, in order, and a request reads
//! only the slots that were written when it was made.
//!
//! A [`SharedList`] reads as one list: iterated, indexed, compared, printed and serialized
//! exactly as a `Vec` of its items (one flat JSON array), so the bytes sent do not change.
//!
//! Must not: know what the items are (the context builds messages, the wire writes them), or
//! change an item another list holds (an edit copies the segment first).

use std::fmt;
use std::ops::{Index, IndexMut, Range};
use std::sync::{Arc, OnceLock};

use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Items of a [`ChunkLog`]'s first chunk; each next one holds twice as many, up to
/// [`MAX_CHUNK_LEN`]. A shared list holds one reference per chunk: a few for a run of
/// thousands of messages, and little room left unwritten in a short one.
pub const FIRST_CHUNK_LEN: usize = 32;
/// Items of a [`ChunkLog`]'s largest chunks (the room a chunk holds before it is written is
/// about 90 bytes an item for messages).
pub const MAX_CHUNK_LEN: usize = 1024;

/// Items in write-once slots: a chunk of a [`ChunkLog`] is shared with requests while the log
/// still fills its later slots.
type Slots<T> = Vec<OnceLock<T>>;

/// A run of written slots of one shared allocation.
struct Segment<T> {
    shared: Arc<Slots<T>>,
    /// Only written slots.
    range: Range<usize>,
}

impl<T> Clone for Segment<T> {
    fn clone(&self) -> Segment<T> {
        Segment {
            shared: Arc::clone(&self.shared),
            range: self.range.clone(),
        }
    }
}

impl<T> Segment<T> {
    fn owned(items: Vec<T>) -> Segment<T> {
        let slots: Slots<T> = items.into_iter().map(OnceLock::from).collect();
        let range = 0..slots.len();
        Segment {
            shared: Arc::new(slots),
            range,
        }
    }

    fn slots(&self) -> &[OnceLock<T>] {
        &self.shared[self.range.clone()]
    }

    fn len(&self) -> usize {
        self.range.len()
    }
}

type SlotIter<'a, T> =
    std::iter::FilterMap<std::slice::Iter<'a, OnceLock<T>>, fn(&'a OnceLock<T>) -> Option<&'a T>>;

/// The written items of a slice of segments (or chunks) `S`, in order.
type Flattened<'a, S, T> =
    std::iter::FlatMap<std::slice::Iter<'a, S>, SlotIter<'a, T>, fn(&'a S) -> SlotIter<'a, T>>;

/// Written slots' items, in order.
fn written<T>(slots: &[OnceLock<T>]) -> SlotIter<'_, T> {
    slots
        .iter()
        .filter_map(OnceLock::get as fn(&OnceLock<T>) -> Option<&T>)
}

fn segment_items<T>(segment: &Segment<T>) -> SlotIter<'_, T> {
    written(segment.slots())
}

fn chunk_items<T>(chunk: &Arc<Slots<T>>) -> SlotIter<'_, T> {
    written(chunk)
}

/// A list made of segments shared with other lists (and with a [`ChunkLog`]), read as one.
/// Cloning it copies a reference per segment.
pub struct SharedList<T> {
    /// Never an empty one.
    segments: Vec<Segment<T>>,
    len: usize,
}

/// The items of a [`SharedList`] in order.
pub struct Iter<'a, T>(Flattened<'a, Segment<T>, T>);

impl<T> Clone for Iter<'_, T> {
    fn clone(&self) -> Self {
        Iter(self.0.clone())
    }
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        self.0.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl<T> DoubleEndedIterator for Iter<'_, T> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back()
    }
}

impl<T> std::iter::FusedIterator for Iter<'_, T> {}

impl<T> Default for SharedList<T> {
    fn default() -> Self {
        SharedList {
            segments: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Clone for SharedList<T> {
    fn clone(&self) -> Self {
        SharedList {
            segments: self.segments.clone(),
            len: self.len,
        }
    }
}

impl<T> SharedList<T> {
    /// No items.
    pub fn new() -> SharedList<T> {
        SharedList::default()
    }

    /// How many items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The items in order.
    pub fn iter(&self) -> Iter<'_, T> {
        Iter(
            self.segments
                .iter()
                .flat_map(segment_items as fn(&Segment<T>) -> SlotIter<'_, T>),
        )
    }

    /// The item at `index`.
    pub fn get(&self, index: usize) -> Option<&T> {
        let (segment, offset) = self.locate(index)?;
        self.segments[segment].slots().get(offset)?.get()
    }

    /// The first item.
    pub fn first(&self) -> Option<&T> {
        self.segments.first()?.slots().first()?.get()
    }

    /// The last item.
    pub fn last(&self) -> Option<&T> {
        self.segments.last()?.slots().last()?.get()
    }

    /// Adds `item` at the end (in place when no other list shares the last segment).
    pub fn push(&mut self, item: T) {
        if let Some(last) = self.segments.last_mut() {
            if last.range.end == last.shared.len() {
                if let Some(owned) = Arc::get_mut(&mut last.shared) {
                    owned.push(OnceLock::from(item));
                    last.range.end += 1;
                    self.len += 1;
                    return;
                }
            }
        }
        self.push_segment(Segment::owned(vec![item]));
    }

    /// Moves `other`'s segments to the end (shared as they were).
    pub fn append(&mut self, other: SharedList<T>) {
        for segment in other.segments {
            self.push_segment(segment);
        }
    }

    /// Keeps the first `len` items.
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

    fn push_segment(&mut self, segment: Segment<T>) {
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

impl<T: Clone> SharedList<T> {
    /// Adds copies of `items` at the end, as one segment of their own.
    pub fn extend_from_slice(&mut self, items: &[T]) {
        self.push_segment(Segment::owned(items.to_vec()));
    }

    /// Copies of the items.
    pub fn to_vec(&self) -> Vec<T> {
        self.iter().cloned().collect()
    }

    /// The items, moved out of the segments no other list shares (the others copied).
    pub fn into_vec(self) -> Vec<T> {
        let mut items = Vec::with_capacity(self.len);
        for Segment { shared, range } in self.segments {
            match Arc::try_unwrap(shared) {
                Ok(mut owned) => items.extend(owned.drain(range).filter_map(OnceLock::into_inner)),
                Err(shared) => items.extend(written(&shared[range]).cloned()),
            }
        }
        items
    }
}

impl<T> Index<usize> for SharedList<T> {
    type Output = T;

    /// Panics when `index` is out of range, as a `Vec`'s index does.
    fn index(&self, index: usize) -> &T {
        match self.get(index) {
            Some(item) => item,
            None => panic!("item {index} of {} items", self.len),
        }
    }
}

impl<T: Clone> IndexMut<usize> for SharedList<T> {
    /// Copies the segment first when another list shares it.
    fn index_mut(&mut self, index: usize) -> &mut T {
        let len = self.len;
        let Some((at, offset)) = self.locate(index) else {
            panic!("item {index} of {len} items");
        };
        let segment = &mut self.segments[at];
        let slot = &mut Arc::make_mut(&mut segment.shared)[segment.range.start + offset];
        match slot.get_mut() {
            Some(item) => item,
            None => panic!("item {index} of {len} items was never written"),
        }
    }
}

impl<'a, T> IntoIterator for &'a SharedList<T> {
    type Item = &'a T;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

impl<T> From<Vec<T>> for SharedList<T> {
    fn from(items: Vec<T>) -> SharedList<T> {
        let mut list = SharedList::new();
        list.push_segment(Segment::owned(items));
        list
    }
}

impl<T> FromIterator<T> for SharedList<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> SharedList<T> {
        SharedList::from(items.into_iter().collect::<Vec<_>>())
    }
}

impl<T: PartialEq> PartialEq for SharedList<T> {
    fn eq(&self, other: &SharedList<T>) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<T: PartialEq> PartialEq<Vec<T>> for SharedList<T> {
    fn eq(&self, other: &Vec<T>) -> bool {
        self.len == other.len() && self.iter().eq(other.iter())
    }
}

impl<T: fmt::Debug> fmt::Debug for SharedList<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Serialize> Serialize for SharedList<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.len))?;
        for item in self {
            seq.serialize_element(item)?;
        }
        seq.end()
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for SharedList<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SharedList<T>, D::Error> {
        Vec::<T>::deserialize(deserializer).map(SharedList::from)
    }
}

/// An append-only list in chunks of write-once slots (growing from [`FIRST_CHUNK_LEN`] to
/// [`MAX_CHUNK_LEN`]): [`ChunkLog::shared_from`] hands the chunks to a [`SharedList`] as they
/// are, the slots written so far, while the log goes on filling the last one. Only the log
/// writes its chunks, each slot once and in order (a clone gets its own last chunk), so what
/// a list holds never changes.
pub struct ChunkLog<T> {
    /// Every chunk but the last is full.
    chunks: Vec<Arc<Slots<T>>>,
    /// The index of each chunk's first item.
    starts: Vec<usize>,
    len: usize,
}

/// The items of a [`ChunkLog`] in order.
pub struct LogIter<'a, T>(Flattened<'a, Arc<Slots<T>>, T>);

impl<T> Clone for LogIter<'_, T> {
    fn clone(&self) -> Self {
        LogIter(self.0.clone())
    }
}

impl<'a, T> Iterator for LogIter<'a, T> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        self.0.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl<T> DoubleEndedIterator for LogIter<'_, T> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back()
    }
}

impl<T> Default for ChunkLog<T> {
    fn default() -> Self {
        ChunkLog {
            chunks: Vec::new(),
            starts: Vec::new(),
            len: 0,
        }
    }
}

impl<T> ChunkLog<T> {
    /// How many items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `item` at the end.
    pub fn push(&mut self, item: T) {
        let (start, capacity) = match (self.starts.last(), self.chunks.last()) {
            (Some(start), Some(chunk)) => (*start, chunk.len()),
            _ => (0, 0),
        };
        if self.len - start == capacity {
            let capacity = (FIRST_CHUNK_LEN << self.chunks.len().min(16)).min(MAX_CHUNK_LEN);
            self.chunks
                .push(Arc::new((0..capacity).map(|_| OnceLock::new()).collect()));
            self.starts.push(self.len);
        }
        let (Some(chunk), Some(start)) = (self.chunks.last(), self.starts.last()) else {
            return;
        };
        // The slot is empty: only this log writes its chunks, and `len` only grows.
        if chunk[self.len - start].set(item).is_ok() {
            self.len += 1;
        }
    }

    /// The item at `index`.
    pub fn get(&self, index: usize) -> Option<&T> {
        if index >= self.len {
            return None;
        }
        let chunk = self
            .starts
            .partition_point(|start| *start <= index)
            .checked_sub(1)?;
        self.chunks[chunk].get(index - self.starts[chunk])?.get()
    }

    /// The items in order.
    pub fn iter(&self) -> LogIter<'_, T> {
        LogIter(
            self.chunks
                .iter()
                .flat_map(chunk_items as fn(&Arc<Slots<T>>) -> SlotIter<'_, T>),
        )
    }

    /// The items from `start` on, as a shared list: the chunks shared, nothing copied.
    pub fn shared_from(&self, start: usize) -> SharedList<T> {
        let mut list = SharedList::new();
        for (chunk, first) in self.chunks.iter().zip(&self.starts) {
            let end = (self.len - first).min(chunk.len());
            let skip = start.saturating_sub(*first).min(end);
            list.push_segment(Segment {
                shared: Arc::clone(chunk),
                range: skip..end,
            });
        }
        list
    }
}

impl<T: Clone> ChunkLog<T> {
    /// The items, moved out of the chunks no shared list still holds (the others copied).
    pub fn into_vec(self) -> Vec<T> {
        self.shared_from(0).into_vec()
    }
}

impl<T: Clone> Clone for ChunkLog<T> {
    /// Shares the full chunks; the last one, still being written, is copied.
    fn clone(&self) -> ChunkLog<T> {
        let mut chunks = self.chunks.clone();
        let last_start = self.starts.last().copied().unwrap_or(0);
        if let Some(last) = chunks.last_mut() {
            if self.len - last_start < last.len() {
                let copy: Slots<T> = last
                    .iter()
                    .map(|slot| {
                        slot.get()
                            .cloned()
                            .map_or_else(OnceLock::new, OnceLock::from)
                    })
                    .collect();
                *last = Arc::new(copy);
            }
        }
        ChunkLog {
            chunks,
            starts: self.starts.clone(),
            len: self.len,
        }
    }
}

impl<'a, T> IntoIterator for &'a ChunkLog<T> {
    type Item = &'a T;
    type IntoIter = LogIter<'a, T>;

    fn into_iter(self) -> LogIter<'a, T> {
        self.iter()
    }
}

impl<T> FromIterator<T> for ChunkLog<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> ChunkLog<T> {
        let mut log = ChunkLog::default();
        for item in items {
            log.push(item);
        }
        log
    }
}

impl<T> Index<usize> for ChunkLog<T> {
    type Output = T;

    /// Panics when `index` is out of range, as a `Vec`'s index does.
    fn index(&self, index: usize) -> &T {
        match self.get(index) {
            Some(item) => item,
            None => panic!("item {index} of {} items", self.len),
        }
    }
}

impl<T: PartialEq> PartialEq for ChunkLog<T> {
    fn eq(&self, other: &ChunkLog<T>) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<T: fmt::Debug> fmt::Debug for ChunkLog<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
