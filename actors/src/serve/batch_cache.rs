//! The orchestrations the page looks at, each indexed once ([`OrchestrationIndex`]) and kept
//! fresh: [`BatchCache`] keeps a few (the least recently used dropped), shared by the
//! server's threads, and refreshes an index before each read (at most every
//! [`super::batch_view::REFRESH_INTERVAL`]).
//!
//! Must not: read files itself (the index does), or hold the list's lock while an index is
//! opened (other orchestrations are served meanwhile).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use super::batch_view::OrchestrationIndex;
use super::run_files::InspectError;

/// Orchestrations kept indexed at once.
pub const CACHED_ORCHESTRATIONS: usize = 16;

/// An orchestration's index in the cache, under its workspace and id.
type CacheEntry = (PathBuf, String, Arc<Mutex<OrchestrationIndex>>);

/// The orchestrations pages look at, indexed and kept fresh; shared by the server's threads.
#[derive(Debug, Default)]
pub struct BatchCache {
    entries: Mutex<Vec<CacheEntry>>,
}

impl BatchCache {
    /// Runs `read` on orchestration `id` of `workspace`, refreshed (blocking: call it off the
    /// async threads).
    pub fn with<T>(
        &self,
        workspace: &Path,
        id: &str,
        read: impl FnOnce(&OrchestrationIndex) -> Result<T, InspectError>,
    ) -> Result<T, InspectError> {
        let cached = |entries: &mut Vec<CacheEntry>| {
            let position = entries
                .iter()
                .position(|(w, i, _)| w.as_path() == workspace && i == id)?;
            // Most recently used last.
            let entry = entries.remove(position);
            let index = entry.2.clone();
            entries.push(entry);
            Some(index)
        };
        let lock = || self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let found = cached(&mut lock());
        let index = match found {
            Some(index) => index,
            None => {
                // Opened without holding the list: other orchestrations are served meanwhile.
                let opened = Arc::new(Mutex::new(OrchestrationIndex::open(workspace, id)?));
                let mut entries = lock();
                match cached(&mut entries) {
                    Some(index) => index,
                    None => {
                        entries.push((workspace.to_path_buf(), id.to_string(), opened.clone()));
                        if entries.len() > CACHED_ORCHESTRATIONS {
                            entries.remove(0);
                        }
                        opened
                    }
                }
            }
        };
        let mut index = index.lock().unwrap_or_else(PoisonError::into_inner);
        index.refresh()?;
        read(&index)
    }
}
