//! Handlers of the mirror admin APIs (CreateMirror, DescribeMirrors, AddTopicsToMirror, …; spec §8)
//! served on the proxy's bootstrap listener, and their authorization on the `ClusterMirror` resource.
//!
//! Must not touch: the replicator directly; it changes mirror state through `mirror`. Not built yet
//! (issue 6).
