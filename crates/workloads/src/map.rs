//! A read/update mix over any [`PersistentMap`]: Silo's Hash, B+tree and RB-tree
//! benchmarks, and TimeStone's list, hash and BST benchmarks at 2 %, 20 % and 80 % updates.

use crate::dist::KeyDist;
use crate::locks::StripedLocks;
use crate::{
    OpKind, Params, PersistentMap, ValueBuf, Workload, fill_value, op_rng, root_link,
    set_root_link, value_for,
};
use rand::Rng;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use tx::{Engine, Op, OpId, Replay, Tx, TxError, TxResult};

/// What an update operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum UpdateStyle {
    /// Half inserts, half deletes of random keys in a key space twice the initial size, so
    /// the size stays about constant (TimeStone's list/hash/BST benchmarks).
    InsertDelete,
    /// Overwrite the value of an existing key (YCSB-style updates).
    Overwrite,
    /// Insert-or-overwrite a random key in the key space (Silo's insert/update benchmarks).
    Upsert,
}

/// The mix workload over map `M`.
#[derive(Debug)]
pub struct MapWorkload<M: PersistentMap> {
    params: Params,
    style: UpdateStyle,
    dist: KeyDist,
    lock: StripedLocks,
    _map: PhantomData<M>,
}

impl<M: PersistentMap> MapWorkload<M> {
    /// A mix with `params.update_percent` updates of `style`, keys drawn by `dist`.
    pub fn new(params: Params, style: UpdateStyle, dist: KeyDist) -> Self {
        let lock = StripedLocks::for_workload(&params, 1);
        MapWorkload {
            params,
            style,
            dist,
            lock,
            _map: PhantomData,
        }
    }

    /// Keys are drawn from `0..key_space`; the initial keys are the even ones.
    fn key_space(&self) -> u64 {
        2 * self.params.keys.max(1)
    }

    fn initial_keys(&self) -> impl Iterator<Item = u64> {
        (0..self.params.keys).map(|i| 2 * i)
    }

    /// The operation `index` of `thread`: `None` for a read of the key, `Some(change)`.
    fn decide(&self, thread: usize, index: u64) -> (u64, Decision) {
        let mut rng = op_rng(self.params.seed, thread, index);
        let is_update = rng.random_range(0..100) < self.params.update_percent;
        let version = ((thread as u64) << 40) | (index + 1);
        let key = match self.style {
            UpdateStyle::Overwrite => 2 * self.dist.sample(&mut rng, self.params.keys.max(1)),
            UpdateStyle::InsertDelete | UpdateStyle::Upsert => {
                self.dist.sample(&mut rng, self.key_space())
            }
        };
        let decision = match (is_update, self.style) {
            (false, _) => Decision::Read,
            (true, UpdateStyle::InsertDelete) if rng.random_bool(0.5) => Decision::Insert(version),
            (true, UpdateStyle::InsertDelete) => Decision::Delete,
            (true, UpdateStyle::Overwrite | UpdateStyle::Upsert) => Decision::Put(version),
        };
        (key, decision)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    Read,
    /// Insert if absent (no change if present).
    Insert(u64),
    Delete,
    /// Insert or overwrite.
    Put(u64),
}

impl Decision {
    /// The registered operation an update decision is logged as.
    fn op_id(self) -> OpId {
        match self {
            Decision::Read => OpId(0),
            Decision::Insert(_) => OP_INSERT,
            Decision::Delete => OP_DELETE,
            Decision::Put(_) => OP_PUT,
        }
    }
}

/// Registered operation: insert a key if absent (args: key, version).
pub const OP_INSERT: OpId = OpId(1);
/// Registered operation: delete a key (args: key, version 0).
pub const OP_DELETE: OpId = OpId(2);
/// Registered operation: insert or overwrite a key (args: key, version).
pub const OP_PUT: OpId = OpId(3);
/// Bytes of a map operation's arguments: the key and the value's version, little-endian.
const ARGS_LEN: usize = 16;

fn encode_args(key: u64, decision: Decision) -> [u8; ARGS_LEN] {
    let version = match decision {
        Decision::Insert(v) | Decision::Put(v) => v,
        Decision::Read | Decision::Delete => 0,
    };
    let mut args = [0u8; ARGS_LEN];
    args[..8].copy_from_slice(&key.to_le_bytes());
    args[8..].copy_from_slice(&version.to_le_bytes());
    args
}

fn decode_args(op: Op<'_>) -> TxResult<(u64, Decision)> {
    let bad = || TxError::Corrupted(format!("map operation {} with bad arguments", op.id.0));
    let args: &[u8; ARGS_LEN] = op.args.try_into().map_err(|_| bad())?;
    let key = u64::from_le_bytes(args[..8].try_into().expect("8 bytes"));
    let version = u64::from_le_bytes(args[8..].try_into().expect("8 bytes"));
    let decision = match op.id {
        OP_INSERT => Decision::Insert(version),
        OP_DELETE => Decision::Delete,
        OP_PUT => Decision::Put(version),
        _ => return Err(bad()),
    };
    Ok((key, decision))
}

/// The body of an update operation: the same code runs live and when recovery re-executes
/// the logged operation.
fn apply<M: PersistentMap, T: Tx>(
    tx: &mut T,
    key: u64,
    decision: Decision,
    size: u32,
) -> TxResult<OpKind> {
    let map = root_link(tx)?;
    match decision {
        Decision::Read => Ok(OpKind::Read),
        Decision::Insert(version) => {
            let mut old = ValueBuf::from_elem(0, size as usize);
            if M::get(tx, map, key, &mut old)? {
                return Ok(OpKind::Read);
            }
            fill_value(key, version, &mut old);
            M::put(tx, map, key, &old)?;
            Ok(OpKind::Insert)
        }
        Decision::Delete => Ok(if M::remove(tx, map, key)? {
            OpKind::Delete
        } else {
            OpKind::Read
        }),
        Decision::Put(version) => {
            let mut value = ValueBuf::from_elem(0, size as usize);
            fill_value(key, version, &mut value);
            let new = M::put(tx, map, key, &value)?;
            Ok(if new { OpKind::Insert } else { OpKind::Update })
        }
    }
}

/// Re-executes the logged update operations of a [`MapWorkload`] over map `M` (the handler
/// an operation-logging engine is opened with).
#[derive(Debug)]
pub struct MapOps<M: PersistentMap> {
    value_size: u32,
    _map: PhantomData<M>,
}

impl<M: PersistentMap> Clone for MapOps<M> {
    fn clone(&self) -> Self {
        MapOps {
            value_size: self.value_size,
            _map: PhantomData,
        }
    }
}

impl<M: PersistentMap> MapOps<M> {
    /// The handler for maps of `value_size`-byte values.
    pub fn new(value_size: u32) -> Self {
        MapOps {
            value_size,
            _map: PhantomData,
        }
    }
}

impl<M: PersistentMap> Replay for MapOps<M> {
    fn handles(&self, id: OpId) -> bool {
        matches!(id, OP_INSERT | OP_DELETE | OP_PUT)
    }

    fn replay<T: Tx>(&self, tx: &mut T, op: Op<'_>) -> TxResult<()> {
        let (key, decision) = decode_args(op)?;
        apply::<M, T>(tx, key, decision, self.value_size).map(|_| ())
    }
}

impl<M: PersistentMap> MapWorkload<M> {
    /// The handler that re-executes this workload's logged operations.
    pub fn ops(&self) -> MapOps<M> {
        MapOps::new(self.params.value_size)
    }
}

impl<M: PersistentMap> Workload for MapWorkload<M> {
    type Model = BTreeMap<u64, Vec<u8>>;

    fn name(&self) -> String {
        format!("{}-{}%", M::NAME, self.params.update_percent)
    }

    fn setup<E: Engine>(&self, engine: &E) -> TxResult<()> {
        let size = self.params.value_size;
        let capacity = self.key_space();
        engine.transaction(|tx| {
            let map = M::create(tx, capacity, size)?;
            set_root_link(tx, map)
        })?;
        let keys: Vec<u64> = self.initial_keys().collect();
        // Batches bounded in bytes: 64 values of 16 KiB were one redo record larger than the
        // 1 MiB lane.
        for batch in keys.chunks(crate::list::entries_per_load_tx(size as usize)) {
            engine.transaction(|tx| {
                let map = root_link(tx)?;
                for &key in batch {
                    M::put(tx, map, key, &value_for(key, 0, size))?;
                }
                Ok::<_, TxError>(())
            })?;
        }
        Ok(())
    }

    fn run_op<E: Engine>(&self, engine: &E, thread: usize, index: u64) -> TxResult<OpKind> {
        let (key, decision) = self.decide(thread, index);
        let size = self.params.value_size;
        let isolation = engine.isolation();
        if let Decision::Read = decision {
            let _held = self.lock.read(isolation, 0);
            let mut value = ValueBuf::from_elem(0, size as usize);
            engine.read_only(|tx| {
                let map = root_link(tx)?;
                M::get(tx, map, key, &mut value)
            })?;
            return Ok(OpKind::Read);
        }
        let _held = self.lock.write(isolation, 0);
        let args = encode_args(key, decision);
        let op = Op {
            id: decision.op_id(),
            args: &args,
        };
        engine.transaction_op(op, |tx| apply::<M, _>(tx, key, decision, size))
    }

    fn check<E: Engine>(&self, engine: &E) -> Result<Self::Model, String> {
        let mut content = None;
        engine
            .read_only(|tx| {
                let map = root_link(tx)?;
                content = Some(M::check(tx, map));
                Ok::<_, TxError>(())
            })
            .map_err(|e| e.to_string())?;
        content.unwrap_or_else(|| Err("check did not run".into()))
    }

    fn initial_model(&self) -> Self::Model {
        self.initial_keys()
            .map(|key| (key, value_for(key, 0, self.params.value_size)))
            .collect()
    }

    fn apply_to_model(&self, model: &mut Self::Model, thread: usize, index: u64) {
        let (key, decision) = self.decide(thread, index);
        let size = self.params.value_size;
        match decision {
            Decision::Read => {}
            Decision::Insert(version) => {
                model
                    .entry(key)
                    .or_insert_with(|| value_for(key, version, size));
            }
            Decision::Delete => {
                model.remove(&key);
            }
            Decision::Put(version) => {
                model.insert(key, value_for(key, version, size));
            }
        }
    }
}
