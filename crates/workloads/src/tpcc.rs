//! TPC-C New-Order, the subset that PM transaction papers run (WHISPER's N-Store, DBx1000
//! harnesses): every operation is one New-Order transaction.
//!
//! # Scaling and capacities
//!
//! [`TpccConfig`] scales TPC-C down so a warehouse fits a small pool (about 0.8 MB with the
//! defaults): 10 districts per warehouse, 30 customers per district (TPC-C: 3000), 1000 items
//! (TPC-C: 100 000), no initial orders (TPC-C loads 3000 per district), and per-district
//! rings of [`TpccConfig::order_capacity`] orders (default 256), each with room for 15 order
//! lines. Warehouse, district, customer, item and stock rows live in fixed-size arrays
//! addressed by computed index.
//!
//! When a district's ring is full, New-Order **wraps around**: order `o_id` reuses the slot of
//! order `o_id - capacity`, whose quantity and line count are first added to the district's
//! `retired_qty` / `retired_lines` counters, so the stock invariants stay checkable (and a
//! benchmark can run for any duration).
//!
//! # Transaction
//!
//! Home warehouse `thread % warehouses + 1`, district uniform, customer and items by
//! NURand (with `A` about a third of the table, as TPC-C's 1023 for 3000 customers, and
//! `C = 0`), 5-15 lines with quantities
//! 1-10, and a remote supply warehouse for 1 % of lines when there is more than one
//! warehouse. 1 % of transactions carry an unused item id in their last line: as in TPC-C
//! they fail when they reach it (after updating the earlier lines' stock) and are rolled
//! back by the engine; `run_op` reports them as completed ([`OpKind::Business`]) and the
//! model ignores them. The entry date is a logical timestamp, `(thread << 40) | (index + 1)`.
//!
//! # Locking under external isolation
//!
//! The district's lock (one stripe of [`StripedLocks`] keyed by district) serialises its
//! `next_o_id` and its order rings; then the stock stripes of the lines' stock rows
//! (`stock_index % 64`), deduplicated and taken in ascending order. Every transaction takes
//! one district lock first and stock stripes in ascending order after it, so no cycle of
//! waits can form. Warehouse, customer and item rows are only read by New-Order and need no
//! lock (a Payment transaction would have to lock its warehouse and customer).
//!
//! # Persistent layout (little-endian, byte offsets; ids are 1-based, indexes 0-based)
//!
//! Header (72 B), linked from the root: 0 magic u64 [`layout::MAGIC`] (`"FERTPCC1"`);
//! 8 warehouses u32; 12 districts per warehouse u32; 16 customers per district u32;
//! 20 items u32; 24 order capacity per district u32; 28 lines per order slot u32 (15);
//! 32 warehouse table ptr; 40 district table ptr; 48 customer table ptr; 56 item table ptr;
//! 64 stock table ptr.
//!
//! Tables (row size; row index; fields as `offset name type`):
//!
//! - warehouse (32 B; `w-1`): 0 w_id u32, 4 w_tax u32 (basis points), 8 w_ytd u64 (cents),
//!   16 w_name `[u8; 16]`.
//! - district (72 B; `(w-1)*D + d-1`): 0 d_id u32, 4 d_w_id u32, 8 d_tax u32, 16 d_ytd u64,
//!   24 d_next_o_id u64, 32 retired_qty u64, 40 retired_lines u64, 48 orders ptr,
//!   56 new-orders ptr, 64 order-lines ptr.
//! - customer (32 B; `district*C + c-1`): 0 c_id u32, 4 c_discount u32 (bp),
//!   8 c_credit `[u8; 2]` (`GC`/`BC`), 16 c_last `[u8; 16]`.
//! - item (32 B; `i-1`): 0 i_id u32, 4 i_price u32 (cents), 8 i_name `[u8; 24]`.
//! - stock (32 B; `(w-1)*I + i-1`): 0 s_quantity u32, 4 s_order_cnt u32, 8 s_ytd u64,
//!   16 s_remote_cnt u32, 20 s_i_id u32, 24 s_w_id u32.
//! - order (32 B; ring slot `(o_id-1) % cap`): 0 o_id u64, 8 o_entry_d u64, 16 o_c_id u32,
//!   20 o_ol_cnt u32, 24 o_all_local u32, 28 o_qty_sum u32.
//! - new-order (16 B; same slot): 0 no_o_id u64, 8 no_d_id u32, 12 no_w_id u32.
//! - order line (16 B; `slot*15 + ol_number-1`): 0 ol_i_id u32, 4 ol_supply_w_id u32,
//!   8 ol_quantity u32, 12 ol_amount u32 (cents). Its order, district and warehouse ids are
//!   implied by its position.
//!
//! Order, new-order and order-line rings are one object each per district; their slots are
//! meaningful only for the live orders `max(1, next_o_id - cap) .. next_o_id`.
//!
//! # Invariants ([`TpccNewOrder::check`])
//!
//! Every row carries its own ids; taxes, discounts, prices and stock quantities are in
//! range; per district, the live orders are exactly the last `min(next_o_id - 1, cap)` order
//! ids, each with `ol_cnt` valid lines whose quantities sum to `o_qty_sum`, amounts equal to
//! quantity × price, `o_all_local` consistent with the supply warehouses, and a new-order
//! entry naming it; `Σ s_ytd = Σ retired_qty + Σ live line quantities` and
//! `Σ s_order_cnt = Σ retired_lines + Σ live lines`.

use crate::dist::fnv1a;
use crate::list::bytes::{corrupt, ptr_at, put_u32, put_u64, u32_at, u64_at};
use crate::locks::{Held, StripedLocks};
use crate::{OpKind, OpRng, Params, Workload, op_rng, root_link, set_root_link};
use rand::Rng;

use tx::{Engine, Isolation, PPtr, Tx, TxError, TxResult};

/// Field offsets and row sizes of the TPC-C tables.
pub mod layout {
    /// Magic word of the TPC-C header.
    pub const MAGIC: u64 = u64::from_le_bytes(*b"FERTPCC1");
    /// Header: magic word.
    pub const H_MAGIC: u64 = 0;
    /// Header: warehouses.
    pub const H_WAREHOUSES: u64 = 8;
    /// Header: districts per warehouse.
    pub const H_DISTRICTS: u64 = 12;
    /// Header: customers per district.
    pub const H_CUSTOMERS: u64 = 16;
    /// Header: items.
    pub const H_ITEMS: u64 = 20;
    /// Header: order ring capacity per district.
    pub const H_ORDER_CAPACITY: u64 = 24;
    /// Header: order-line slots per order.
    pub const H_LINES_PER_ORDER: u64 = 28;
    /// Header: warehouse table.
    pub const H_WAREHOUSE_TABLE: u64 = 32;
    /// Header: district table.
    pub const H_DISTRICT_TABLE: u64 = 40;
    /// Header: customer table.
    pub const H_CUSTOMER_TABLE: u64 = 48;
    /// Header: item table.
    pub const H_ITEM_TABLE: u64 = 56;
    /// Header: stock table.
    pub const H_STOCK_TABLE: u64 = 64;
    /// Header size.
    pub const HEADER_SIZE: u64 = 72;

    /// Warehouse row size.
    pub const W_ROW: u64 = 32;
    /// Warehouse: id.
    pub const W_ID: u64 = 0;
    /// Warehouse: tax in basis points.
    pub const W_TAX: u64 = 4;
    /// Warehouse: year-to-date balance in cents.
    pub const W_YTD: u64 = 8;
    /// Warehouse: name.
    pub const W_NAME: u64 = 16;

    /// District row size.
    pub const D_ROW: u64 = 72;
    /// District: id.
    pub const D_ID: u64 = 0;
    /// District: warehouse id.
    pub const D_W_ID: u64 = 4;
    /// District: tax in basis points.
    pub const D_TAX: u64 = 8;
    /// District: year-to-date balance in cents.
    pub const D_YTD: u64 = 16;
    /// District: next order id (the first of the three words New-Order writes).
    pub const D_NEXT_O_ID: u64 = 24;
    /// District: sum of the line quantities of orders evicted from the ring.
    pub const D_RETIRED_QTY: u64 = 32;
    /// District: number of lines of orders evicted from the ring.
    pub const D_RETIRED_LINES: u64 = 40;
    /// District: order ring.
    pub const D_ORDERS: u64 = 48;
    /// District: new-order ring.
    pub const D_NEW_ORDERS: u64 = 56;
    /// District: order-line ring.
    pub const D_ORDER_LINES: u64 = 64;

    /// Customer row size.
    pub const C_ROW: u64 = 32;
    /// Customer: id.
    pub const C_ID: u64 = 0;
    /// Customer: discount in basis points.
    pub const C_DISCOUNT: u64 = 4;
    /// Customer: credit, `GC` or `BC`.
    pub const C_CREDIT: u64 = 8;
    /// Customer: last name.
    pub const C_LAST: u64 = 16;

    /// Item row size.
    pub const I_ROW: u64 = 32;
    /// Item: id.
    pub const I_ID: u64 = 0;
    /// Item: price in cents.
    pub const I_PRICE: u64 = 4;
    /// Item: name.
    pub const I_NAME: u64 = 8;

    /// Stock row size.
    pub const S_ROW: u64 = 32;
    /// Stock: quantity.
    pub const S_QUANTITY: u64 = 0;
    /// Stock: number of order lines.
    pub const S_ORDER_CNT: u64 = 4;
    /// Stock: year-to-date quantity.
    pub const S_YTD: u64 = 8;
    /// Stock: number of remote order lines.
    pub const S_REMOTE_CNT: u64 = 16;
    /// Stock: item id.
    pub const S_I_ID: u64 = 20;
    /// Stock: warehouse id.
    pub const S_W_ID: u64 = 24;
    /// Stock: bytes New-Order writes for a local line (quantity, order count, ytd).
    pub const S_LOCAL_WRITE: u64 = 16;
    /// Stock: bytes New-Order writes for a remote line (also the remote count).
    pub const S_REMOTE_WRITE: u64 = 20;

    /// Order row size.
    pub const O_ROW: u64 = 32;
    /// Order: id.
    pub const O_ID: u64 = 0;
    /// Order: entry date (a logical timestamp).
    pub const O_ENTRY_D: u64 = 8;
    /// Order: customer id.
    pub const O_C_ID: u64 = 16;
    /// Order: number of lines.
    pub const O_OL_CNT: u64 = 20;
    /// Order: 1 if every line is supplied by the home warehouse.
    pub const O_ALL_LOCAL: u64 = 24;
    /// Order: sum of the line quantities.
    pub const O_QTY_SUM: u64 = 28;

    /// New-order row size.
    pub const NO_ROW: u64 = 16;
    /// New-order: order id.
    pub const NO_O_ID: u64 = 0;
    /// New-order: district id.
    pub const NO_D_ID: u64 = 8;
    /// New-order: warehouse id.
    pub const NO_W_ID: u64 = 12;

    /// Order-line row size.
    pub const OL_ROW: u64 = 16;
    /// Order line: item id.
    pub const OL_I_ID: u64 = 0;
    /// Order line: supplying warehouse id.
    pub const OL_SUPPLY_W_ID: u64 = 4;
    /// Order line: quantity.
    pub const OL_QUANTITY: u64 = 8;
    /// Order line: amount in cents.
    pub const OL_AMOUNT: u64 = 12;
}
use layout::*;

/// Fewest lines of an order.
pub const MIN_LINES: u32 = 5;
/// Most lines of an order (and line slots per ring slot).
pub const MAX_LINES: u32 = 15;
/// Largest quantity of a line.
const MAX_QUANTITY: u32 = 10;
/// Percentage of lines supplied by a remote warehouse (when there are several).
const REMOTE_PERCENT: u32 = 1;
/// Percentage of transactions rolled back by an unused item id.
const ROLLBACK_PERCENT: u32 = 1;
/// Stock lock stripes.
const STOCK_LOCK_STRIPES: usize = 64;
/// District lock stripes, at most.
const MAX_DISTRICT_LOCKS: usize = 1024;
/// Bytes written per setup transaction when filling tables.
const FILL_BYTES_PER_TX: u64 = 16 * 1024;
/// Basis points in one (taxes and discounts).
const BASIS: u64 = 10_000;
/// Largest tax, in basis points (TPC-C: 0.2).
const MAX_TAX: u32 = 2_000;
/// Largest discount, in basis points (TPC-C: 0.5).
const MAX_DISCOUNT: u32 = 5_000;
/// Item price range in cents (TPC-C: 1.00 to 100.00).
const PRICE_RANGE: std::ops::RangeInclusive<u32> = 100..=10_000;
/// Stock quantity range (TPC-C: 10 to 100; New-Order keeps it there).
const QUANTITY_RANGE: std::ops::RangeInclusive<u32> = 10..=100;

/// Scale of the database.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TpccConfig {
    /// Warehouses (1..=1000).
    pub warehouses: u32,
    /// Districts per warehouse (TPC-C: 10; 1..=100).
    pub districts: u32,
    /// Customers per district (TPC-C: 3000; 1..=100 000).
    pub customers: u32,
    /// Items (TPC-C: 100 000; 1..=1 000 000).
    pub items: u32,
    /// Orders each district's ring holds before wrapping around (1..=1 000 000).
    pub order_capacity: u32,
    /// Seed of the generated rows and of every transaction.
    pub seed: u64,
}

impl Default for TpccConfig {
    fn default() -> Self {
        TpccConfig {
            warehouses: 1,
            districts: 10,
            customers: 30,
            items: 1000,
            order_capacity: 256,
            seed: 42,
        }
    }
}

impl TpccConfig {
    /// The default scale with one warehouse per thread (TPC-C binds each terminal to a
    /// warehouse) and the parameters' seed.
    pub fn from_params(params: &Params) -> Self {
        TpccConfig {
            warehouses: u32::try_from(params.threads.clamp(1, 1000)).unwrap_or(1),
            seed: params.seed,
            ..TpccConfig::default()
        }
    }

    /// Checks every dimension against its range.
    pub fn validate(&self) -> Result<(), String> {
        let dims = [
            ("warehouses", self.warehouses, 1000),
            ("districts", self.districts, 100),
            ("customers", self.customers, 100_000),
            ("items", self.items, 1_000_000),
            ("order_capacity", self.order_capacity, 1_000_000),
        ];
        match dims
            .iter()
            .find(|(_, value, max)| !(1..=*max).contains(value))
        {
            Some((name, value, max)) => Err(format!("TPC-C {name} = {value} not in 1..={max}")),
            None => Ok(()),
        }
    }

    fn district_count(&self) -> u64 {
        u64::from(self.warehouses) * u64::from(self.districts)
    }

    fn stock_count(&self) -> u64 {
        u64::from(self.warehouses) * u64::from(self.items)
    }

    /// Index of district `d` of warehouse `w` (ids 1-based).
    fn district_index(&self, w: u32, d: u32) -> u64 {
        u64::from(w - 1) * u64::from(self.districts) + u64::from(d - 1)
    }

    fn customer_index(&self, w: u32, d: u32, c: u32) -> u64 {
        self.district_index(w, d) * u64::from(self.customers) + u64::from(c - 1)
    }

    fn stock_index(&self, w: u32, i: u32) -> u64 {
        u64::from(w - 1) * u64::from(self.items) + u64::from(i - 1)
    }

    /// Ring slot of order `o_id` (`o_id >= 1`).
    fn slot(&self, o_id: u64) -> u64 {
        (o_id - 1) % u64::from(self.order_capacity)
    }

    /// A generated attribute of row `id` of table `table`.
    fn attribute(&self, table: u64, id: u64) -> u64 {
        fnv1a(fnv1a(self.seed ^ (table << 56)) ^ id)
    }

    fn initial_quantity(&self, w: u32, i: u32) -> u32 {
        let span = u64::from(QUANTITY_RANGE.end() - QUANTITY_RANGE.start() + 1);
        QUANTITY_RANGE.start() + (self.attribute(5, self.stock_index(w, i)) % span) as u32
    }
}

/// The logical content `check` returns: what New-Order changes, summarised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TpccModel {
    /// Orders created per district (`next_o_id - 1`), index `(w-1)*districts + d-1`.
    pub orders: Vec<u64>,
    /// `s_quantity` per stock row, index `(w-1)*items + i-1`.
    pub stock_quantity: Vec<u32>,
    /// Σ `s_ytd`.
    pub stock_ytd: u64,
    /// Σ `s_order_cnt`.
    pub stock_order_cnt: u64,
    /// Σ `s_remote_cnt`.
    pub stock_remote_cnt: u64,
}

/// TPC-C's stock replenishment rule: take `quantity`, refill by 91 when fewer than 10 would
/// remain. Keeps a quantity in `10..=100` there (and never underflows for `quantity <= 10`).
fn restock(stock: u32, quantity: u32) -> u32 {
    if stock >= quantity + 10 {
        stock - quantity
    } else {
        stock + 91 - quantity
    }
}

/// One line of a planned New-Order.
#[derive(Clone, Copy, Debug)]
struct LinePlan {
    item: u32,
    supply_w: u32,
    quantity: u32,
}

/// A planned New-Order: a pure function of (seed, thread, index).
#[derive(Clone, Debug)]
struct Plan {
    w: u32,
    d: u32,
    c: u32,
    lines: Vec<LinePlan>,
    /// The last line names an unused item: the transaction rolls back.
    rollback: bool,
    entry_d: u64,
}

/// How a New-Order transaction body fails.
#[derive(Debug)]
enum NewOrderError {
    /// An engine or corruption error.
    Tx(TxError),
    /// The unused item of TPC-C's 1 % rollbacks.
    InvalidItem,
}

impl From<TxError> for NewOrderError {
    fn from(error: TxError) -> Self {
        NewOrderError::Tx(error)
    }
}

/// NURand(A, 1, n) of TPC-C (clause 2.1.6), `((random(0, A) | random(1, n)) + C) % n + 1`,
/// with `C = 0` and `A` scaled to the table size.
fn nurand(rng: &mut OpRng, n: u32) -> u32 {
    let a = nurand_a(n);
    ((rng.random_range(0..=a) | rng.random_range(1..=n)) % n) + 1
}

/// NURand's `A` for a table of `n` rows: about a third of it, one less than a power of two
/// (TPC-C's 1023 for its 3000 customers).
fn nurand_a(n: u32) -> u32 {
    (n / 3).max(1).next_power_of_two() - 1
}

/// The table pointers of the header.
#[derive(Clone, Copy)]
struct Tables {
    warehouses: PPtr,
    districts: PPtr,
    customers: PPtr,
    items: PPtr,
    stock: PPtr,
}

/// The fields of a district row that New-Order uses.
#[derive(Clone, Copy)]
struct District {
    at: PPtr,
    tax: u32,
    next_o_id: u64,
    retired_qty: u64,
    retired_lines: u64,
    orders: PPtr,
    new_orders: PPtr,
    lines: PPtr,
}

/// The order lines of a New-Order, encoded, with their totals.
struct Lines {
    rows: Vec<u8>,
    qty_sum: u32,
    all_local: bool,
    amount: u64,
}

/// The TPC-C New-Order workload.
#[derive(Debug)]
pub struct TpccNewOrder {
    config: TpccConfig,
    /// Order lines per New-Order (TPC-C: [`MIN_LINES`]`..=`[`MAX_LINES`]).
    lines: std::ops::RangeInclusive<u32>,
    district_locks: StripedLocks,
    stock_locks: Vec<StripedLocks>,
}

impl TpccNewOrder {
    /// The workload at `config`'s scale; fails if a dimension is out of range.
    pub fn new(config: TpccConfig) -> Result<Self, String> {
        config.validate()?;
        let districts = usize::try_from(config.district_count()).unwrap_or(MAX_DISTRICT_LOCKS);
        Ok(TpccNewOrder {
            lines: MIN_LINES..=MAX_LINES,
            district_locks: StripedLocks::new(districts.min(MAX_DISTRICT_LOCKS)),
            stock_locks: (0..STOCK_LOCK_STRIPES)
                .map(|_| StripedLocks::global())
                .collect(),
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &TpccConfig {
        &self.config
    }

    /// The same workload with New-Orders of `lines` order lines (within `1..=MAX_LINES`, the
    /// slots an order has) instead of TPC-C's 5–15: the hardware-logging papers size
    /// New-Order smaller (HOOP, ISCA'20: 10–35 stores per transaction).
    pub fn with_lines(mut self, lines: std::ops::RangeInclusive<u32>) -> Result<Self, String> {
        if *lines.start() < 1 || lines.start() > lines.end() || *lines.end() > MAX_LINES {
            return Err(format!(
                "order lines {lines:?} must be a non-empty range within 1..={MAX_LINES}"
            ));
        }
        self.lines = lines;
        Ok(self)
    }

    fn plan(&self, thread: usize, index: u64) -> Plan {
        let cfg = &self.config;
        let mut rng = op_rng(cfg.seed, thread, index);
        let w = (thread % cfg.warehouses as usize) as u32 + 1;
        let d = rng.random_range(1..=cfg.districts);
        let c = nurand(&mut rng, cfg.customers);
        let count = rng.random_range(self.lines.clone());
        let rollback = rng.random_range(0..100) < ROLLBACK_PERCENT;
        let mut lines = Vec::with_capacity(count as usize);
        for number in 1..=count {
            let item = if rollback && number == count {
                cfg.items + 1
            } else {
                nurand(&mut rng, cfg.items)
            };
            let supply_w = self.supply_warehouse(&mut rng, w);
            let quantity = rng.random_range(1..=MAX_QUANTITY);
            lines.push(LinePlan {
                item,
                supply_w,
                quantity,
            });
        }
        let entry_d = ((thread as u64) << 40) | (index + 1);
        Plan {
            w,
            d,
            c,
            lines,
            rollback,
            entry_d,
        }
    }

    /// The home warehouse `w`, or for 1 % of lines another one.
    fn supply_warehouse(&self, rng: &mut OpRng, w: u32) -> u32 {
        let warehouses = self.config.warehouses;
        if warehouses == 1 || rng.random_range(0..100) >= REMOTE_PERCENT {
            return w;
        }
        let other = rng.random_range(1..warehouses);
        if other >= w { other + 1 } else { other }
    }

    /// The district lock, then the stock stripes in ascending order (see the module docs).
    fn lock(&self, isolation: Isolation, plan: &Plan) -> Vec<Held<'_>> {
        if isolation == Isolation::Internal {
            return Vec::new();
        }
        let district = self.config.district_index(plan.w, plan.d);
        let mut held = vec![self.district_locks.write(isolation, district)];
        let mut stripes: Vec<usize> = plan
            .lines
            .iter()
            .filter(|line| line.item <= self.config.items)
            .map(|line| {
                let stock = self.config.stock_index(line.supply_w, line.item);
                (stock % STOCK_LOCK_STRIPES as u64) as usize
            })
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        held.extend(
            stripes
                .into_iter()
                .map(|stripe| self.stock_locks[stripe].write(isolation, 0)),
        );
        held
    }
}

// ---------------------------------------------------------------------------------------
// The New-Order transaction.
// ---------------------------------------------------------------------------------------

impl TpccNewOrder {
    /// One New-Order; returns the order's total in cents (after discount and taxes).
    fn execute<T: Tx>(&self, tx: &mut T, plan: &Plan) -> Result<u64, NewOrderError> {
        let tables = self.tables(tx)?;
        let w_tax = self.warehouse_tax(tx, &tables, plan.w)?;
        let district = self.district(tx, &tables, plan.w, plan.d)?;
        let discount = self.customer_discount(tx, &tables, plan)?;
        let o_id = district.next_o_id;
        let slot = self.config.slot(o_id);
        self.advance_district(tx, &district, slot)?;
        let lines = self.take_stock(tx, &tables, plan)?;
        self.insert_order(tx, &district, plan, o_id, &lines)?;
        let taxes = BASIS + u64::from(w_tax) + u64::from(district.tax);
        Ok(lines.amount * (BASIS - u64::from(discount)) * taxes / (BASIS * BASIS))
    }

    /// Reads the header and checks that it describes this configuration.
    fn tables<T: Tx>(&self, tx: &mut T) -> TxResult<Tables> {
        let header = root_link(tx)?;
        let mut buf = [0u8; HEADER_SIZE as usize];
        tx.read(header, 0, &mut buf)?;
        if u64_at(&buf, H_MAGIC) != MAGIC {
            return Err(corrupt("root object does not link a TPC-C header"));
        }
        let cfg = &self.config;
        let stored = [
            (H_WAREHOUSES, cfg.warehouses),
            (H_DISTRICTS, cfg.districts),
            (H_CUSTOMERS, cfg.customers),
            (H_ITEMS, cfg.items),
            (H_ORDER_CAPACITY, cfg.order_capacity),
            (H_LINES_PER_ORDER, MAX_LINES),
        ];
        if let Some((at, want)) = stored.iter().find(|(at, want)| u32_at(&buf, *at) != *want) {
            let found = u32_at(&buf, *at);
            return Err(corrupt(format!(
                "header word {at} is {found}, expected {want}"
            )));
        }
        Ok(Tables {
            warehouses: ptr_at(tx, &buf, H_WAREHOUSE_TABLE)?,
            districts: ptr_at(tx, &buf, H_DISTRICT_TABLE)?,
            customers: ptr_at(tx, &buf, H_CUSTOMER_TABLE)?,
            items: ptr_at(tx, &buf, H_ITEM_TABLE)?,
            stock: ptr_at(tx, &buf, H_STOCK_TABLE)?,
        })
    }

    fn warehouse_tax<T: Tx>(&self, tx: &mut T, tables: &Tables, w: u32) -> TxResult<u32> {
        let mut row = [0u8; 8];
        tx.read(tables.warehouses, u64::from(w - 1) * W_ROW, &mut row)?;
        expect_id("warehouse", u32_at(&row, W_ID), w)?;
        in_range("w_tax", u32_at(&row, W_TAX), 0..=MAX_TAX)
    }

    /// Reads district `d` of warehouse `w` (one read of its row).
    fn district<T: Tx>(&self, tx: &mut T, tables: &Tables, w: u32, d: u32) -> TxResult<District> {
        let at = tables
            .districts
            .offset_by(self.config.district_index(w, d) * D_ROW);
        let mut row = [0u8; D_ROW as usize];
        tx.read(at, 0, &mut row)?;
        expect_id("district", u32_at(&row, D_ID), d)?;
        expect_id("district warehouse", u32_at(&row, D_W_ID), w)?;
        let next_o_id = u64_at(&row, D_NEXT_O_ID);
        if next_o_id == 0 || next_o_id == u64::MAX {
            return Err(corrupt(format!("d_next_o_id {next_o_id} out of range")));
        }
        Ok(District {
            at,
            tax: in_range("d_tax", u32_at(&row, D_TAX), 0..=MAX_TAX)?,
            next_o_id,
            retired_qty: u64_at(&row, D_RETIRED_QTY),
            retired_lines: u64_at(&row, D_RETIRED_LINES),
            orders: ptr_at(tx, &row, D_ORDERS)?,
            new_orders: ptr_at(tx, &row, D_NEW_ORDERS)?,
            lines: ptr_at(tx, &row, D_ORDER_LINES)?,
        })
    }

    /// Reads the customer (discount, credit, last name) and returns the discount.
    fn customer_discount<T: Tx>(&self, tx: &mut T, tables: &Tables, plan: &Plan) -> TxResult<u32> {
        let index = self.config.customer_index(plan.w, plan.d, plan.c);
        let mut row = [0u8; C_ROW as usize];
        tx.read(tables.customers, index * C_ROW, &mut row)?;
        expect_id("customer", u32_at(&row, C_ID), plan.c)?;
        in_range("c_discount", u32_at(&row, C_DISCOUNT), 0..=MAX_DISCOUNT)
    }

    /// Takes order id `next_o_id`: evicts the order in its ring slot if the ring is full,
    /// then writes `next_o_id + 1` (and the retired counters, after an eviction).
    fn advance_district<T: Tx>(&self, tx: &mut T, district: &District, slot: u64) -> TxResult<()> {
        let o_id = district.next_o_id;
        let capacity = u64::from(self.config.order_capacity);
        if o_id <= capacity {
            return tx.write_u64(district.at, D_NEXT_O_ID, o_id + 1);
        }
        let (qty, lines) = self.evicted_order(tx, district, slot, o_id - capacity)?;
        let mut words = [0u8; 24];
        put_u64(&mut words, 0, o_id + 1);
        put_u64(&mut words, 8, district.retired_qty.wrapping_add(qty));
        put_u64(&mut words, 16, district.retired_lines.wrapping_add(lines));
        tx.write(district.at, D_NEXT_O_ID, &words)
    }

    /// The quantity sum and line count of order `o_id`, about to leave the ring.
    fn evicted_order<T: Tx>(
        &self,
        tx: &mut T,
        district: &District,
        slot: u64,
        o_id: u64,
    ) -> TxResult<(u64, u64)> {
        let mut row = [0u8; O_ROW as usize];
        tx.read(district.orders, slot * O_ROW, &mut row)?;
        if u64_at(&row, O_ID) != o_id {
            return Err(corrupt(format!(
                "ring slot {slot} does not hold order {o_id}"
            )));
        }
        let lines = in_range("o_ol_cnt", u32_at(&row, O_OL_CNT), self.lines.clone())?;
        Ok((u64::from(u32_at(&row, O_QTY_SUM)), u64::from(lines)))
    }

    /// Reads each line's item and updates its stock row; encodes the order lines.
    fn take_stock<T: Tx>(
        &self,
        tx: &mut T,
        tables: &Tables,
        plan: &Plan,
    ) -> Result<Lines, NewOrderError> {
        let mut lines = Lines {
            rows: vec![0u8; plan.lines.len() * OL_ROW as usize],
            qty_sum: 0,
            all_local: true,
            amount: 0,
        };
        for (n, line) in plan.lines.iter().enumerate() {
            if line.item == 0 || line.item > self.config.items {
                return Err(NewOrderError::InvalidItem);
            }
            let price = self.item_price(tx, tables, line.item)?;
            self.update_stock(tx, tables, line, line.supply_w != plan.w)?;
            let amount = line.quantity * price;
            let at = n as u64 * OL_ROW;
            put_u32(&mut lines.rows, at + OL_I_ID, line.item);
            put_u32(&mut lines.rows, at + OL_SUPPLY_W_ID, line.supply_w);
            put_u32(&mut lines.rows, at + OL_QUANTITY, line.quantity);
            put_u32(&mut lines.rows, at + OL_AMOUNT, amount);
            lines.qty_sum += line.quantity;
            lines.all_local &= line.supply_w == plan.w;
            lines.amount += u64::from(amount);
        }
        Ok(lines)
    }

    /// Reads the item row (price and name) and returns the price.
    fn item_price<T: Tx>(&self, tx: &mut T, tables: &Tables, item: u32) -> TxResult<u32> {
        let mut row = [0u8; I_ROW as usize];
        tx.read(tables.items, u64::from(item - 1) * I_ROW, &mut row)?;
        expect_id("item", u32_at(&row, I_ID), item)?;
        in_range("i_price", u32_at(&row, I_PRICE), PRICE_RANGE)
    }

    /// Applies one line to its stock row: quantity, ytd, order count (and remote count).
    fn update_stock<T: Tx>(
        &self,
        tx: &mut T,
        tables: &Tables,
        line: &LinePlan,
        remote: bool,
    ) -> TxResult<()> {
        let index = self.config.stock_index(line.supply_w, line.item);
        let at = tables.stock.offset_by(index * S_ROW);
        let mut row = [0u8; S_ROW as usize];
        tx.read(at, 0, &mut row)?;
        expect_id("stock item", u32_at(&row, S_I_ID), line.item)?;
        expect_id("stock warehouse", u32_at(&row, S_W_ID), line.supply_w)?;
        let quantity = in_range("s_quantity", u32_at(&row, S_QUANTITY), QUANTITY_RANGE)?;
        put_u32(&mut row, S_QUANTITY, restock(quantity, line.quantity));
        let order_cnt = u32_at(&row, S_ORDER_CNT).wrapping_add(1);
        put_u32(&mut row, S_ORDER_CNT, order_cnt);
        let ytd = u64_at(&row, S_YTD).wrapping_add(u64::from(line.quantity));
        put_u64(&mut row, S_YTD, ytd);
        let written = if remote {
            let count = u32_at(&row, S_REMOTE_CNT).wrapping_add(1);
            put_u32(&mut row, S_REMOTE_CNT, count);
            S_REMOTE_WRITE
        } else {
            S_LOCAL_WRITE
        };
        tx.write(at, 0, &row[..written as usize])
    }

    /// Writes the order's lines (one write), its order row and its new-order row.
    fn insert_order<T: Tx>(
        &self,
        tx: &mut T,
        district: &District,
        plan: &Plan,
        o_id: u64,
        lines: &Lines,
    ) -> TxResult<()> {
        let slot = self.config.slot(o_id);
        let lines_at = slot * u64::from(MAX_LINES) * OL_ROW;
        tx.write(district.lines, lines_at, &lines.rows)?;
        let mut order = [0u8; O_ROW as usize];
        put_u64(&mut order, O_ID, o_id);
        put_u64(&mut order, O_ENTRY_D, plan.entry_d);
        put_u32(&mut order, O_C_ID, plan.c);
        put_u32(&mut order, O_OL_CNT, plan.lines.len() as u32);
        put_u32(&mut order, O_ALL_LOCAL, u32::from(lines.all_local));
        put_u32(&mut order, O_QTY_SUM, lines.qty_sum);
        tx.write(district.orders, slot * O_ROW, &order)?;
        let mut new_order = [0u8; NO_ROW as usize];
        put_u64(&mut new_order, NO_O_ID, o_id);
        put_u32(&mut new_order, NO_D_ID, plan.d);
        put_u32(&mut new_order, NO_W_ID, plan.w);
        tx.write(district.new_orders, slot * NO_ROW, &new_order)
    }
}

fn expect_id(what: &str, found: u32, want: u32) -> TxResult<()> {
    if found != want {
        return Err(corrupt(format!(
            "{what} row holds id {found}, expected {want}"
        )));
    }
    Ok(())
}

fn in_range(what: &str, value: u32, range: std::ops::RangeInclusive<u32>) -> TxResult<u32> {
    if !range.contains(&value) {
        return Err(corrupt(format!("{what} = {value} outside {range:?}")));
    }
    Ok(value)
}

// ---------------------------------------------------------------------------------------
// Setup: allocate every table, fill the fixed ones, link the header last.
// ---------------------------------------------------------------------------------------

/// Fixed-width ASCII field: `prefix-id`, zero-padded or truncated to `len` bytes.
fn name_field(prefix: &str, id: u64, len: usize) -> Vec<u8> {
    let mut bytes = format!("{prefix}-{id}").into_bytes();
    bytes.resize(len, 0);
    bytes
}

impl TpccNewOrder {
    /// Allocates the header and every table and ring; writes the header, warehouse and
    /// district rows. Returns the (not yet linked) header and the tables.
    fn allocate<T: Tx>(&self, tx: &mut T) -> TxResult<(PPtr, Tables)> {
        let cfg = &self.config;
        let header = tx.alloc(HEADER_SIZE)?;
        let tables = Tables {
            warehouses: tx.alloc(u64::from(cfg.warehouses) * W_ROW)?,
            districts: tx.alloc(cfg.district_count() * D_ROW)?,
            customers: tx.alloc(cfg.district_count() * u64::from(cfg.customers) * C_ROW)?,
            items: tx.alloc(u64::from(cfg.items) * I_ROW)?,
            stock: tx.alloc(cfg.stock_count() * S_ROW)?,
        };
        tx.write(header, 0, &self.header_bytes(&tables))?;
        let warehouses = (1..=cfg.warehouses).flat_map(|w| self.warehouse_row(w));
        tx.write(tables.warehouses, 0, &warehouses.collect::<Vec<u8>>())?;
        for w in 1..=cfg.warehouses {
            for d in 1..=cfg.districts {
                let row = self.district_row(tx, w, d)?;
                let index = cfg.district_index(w, d);
                tx.write(tables.districts, index * D_ROW, &row)?;
            }
        }
        Ok((header, tables))
    }

    fn header_bytes(&self, tables: &Tables) -> [u8; HEADER_SIZE as usize] {
        let cfg = &self.config;
        let mut buf = [0u8; HEADER_SIZE as usize];
        put_u64(&mut buf, H_MAGIC, MAGIC);
        put_u32(&mut buf, H_WAREHOUSES, cfg.warehouses);
        put_u32(&mut buf, H_DISTRICTS, cfg.districts);
        put_u32(&mut buf, H_CUSTOMERS, cfg.customers);
        put_u32(&mut buf, H_ITEMS, cfg.items);
        put_u32(&mut buf, H_ORDER_CAPACITY, cfg.order_capacity);
        put_u32(&mut buf, H_LINES_PER_ORDER, MAX_LINES);
        put_u64(&mut buf, H_WAREHOUSE_TABLE, tables.warehouses.word());
        put_u64(&mut buf, H_DISTRICT_TABLE, tables.districts.word());
        put_u64(&mut buf, H_CUSTOMER_TABLE, tables.customers.word());
        put_u64(&mut buf, H_ITEM_TABLE, tables.items.word());
        put_u64(&mut buf, H_STOCK_TABLE, tables.stock.word());
        buf
    }

    fn tax(&self, table: u64, id: u64) -> u32 {
        (self.config.attribute(table, id) % u64::from(MAX_TAX + 1)) as u32
    }

    fn warehouse_row(&self, w: u32) -> [u8; W_ROW as usize] {
        let mut row = [0u8; W_ROW as usize];
        put_u32(&mut row, W_ID, w);
        put_u32(&mut row, W_TAX, self.tax(1, u64::from(w)));
        put_u64(&mut row, W_YTD, 30_000_000);
        row[W_NAME as usize..].copy_from_slice(&name_field("wh", u64::from(w), 16));
        row
    }

    /// A district row with freshly allocated (uninitialised) rings.
    fn district_row<T: Tx>(&self, tx: &mut T, w: u32, d: u32) -> TxResult<[u8; D_ROW as usize]> {
        let capacity = u64::from(self.config.order_capacity);
        let mut row = [0u8; D_ROW as usize];
        put_u32(&mut row, D_ID, d);
        put_u32(&mut row, D_W_ID, w);
        put_u32(
            &mut row,
            D_TAX,
            self.tax(2, self.config.district_index(w, d)),
        );
        put_u64(&mut row, D_YTD, 3_000_000);
        put_u64(&mut row, D_NEXT_O_ID, 1);
        put_u64(&mut row, D_ORDERS, tx.alloc::<()>(capacity * O_ROW)?.word());
        put_u64(
            &mut row,
            D_NEW_ORDERS,
            tx.alloc::<()>(capacity * NO_ROW)?.word(),
        );
        let lines = capacity * u64::from(MAX_LINES) * OL_ROW;
        put_u64(&mut row, D_ORDER_LINES, tx.alloc::<()>(lines)?.word());
        Ok(row)
    }

    fn customer_row(&self, index: u64, row: &mut [u8]) {
        let cfg = &self.config;
        let c = (index % u64::from(cfg.customers)) as u32 + 1;
        let attribute = cfg.attribute(3, index);
        put_u32(row, C_ID, c);
        put_u32(
            row,
            C_DISCOUNT,
            (attribute % u64::from(MAX_DISCOUNT + 1)) as u32,
        );
        let credit = if (attribute >> 32).is_multiple_of(10) {
            b"BC"
        } else {
            b"GC"
        };
        row[C_CREDIT as usize..C_CREDIT as usize + 2].copy_from_slice(credit);
        row[C_LAST as usize..].copy_from_slice(&name_field("cust", u64::from(c), 16));
    }

    fn item_row(&self, index: u64, row: &mut [u8]) {
        let span = u64::from(PRICE_RANGE.end() - PRICE_RANGE.start() + 1);
        let price = PRICE_RANGE.start() + (self.config.attribute(4, index) % span) as u32;
        put_u32(row, I_ID, index as u32 + 1);
        put_u32(row, I_PRICE, price);
        row[I_NAME as usize..].copy_from_slice(&name_field("item", index + 1, 24));
    }

    fn stock_row(&self, index: u64, row: &mut [u8]) {
        let items = u64::from(self.config.items);
        let (w, i) = ((index / items) as u32 + 1, (index % items) as u32 + 1);
        put_u32(row, S_QUANTITY, self.config.initial_quantity(w, i));
        put_u32(row, S_I_ID, i);
        put_u32(row, S_W_ID, w);
    }

    /// Writes `rows` rows of `row_size` bytes generated by `fill`, a bounded chunk per
    /// transaction.
    fn fill_table<E: Engine>(
        engine: &E,
        table: PPtr,
        rows: u64,
        row_size: u64,
        fill: impl Fn(u64, &mut [u8]),
    ) -> TxResult<()> {
        let per_tx = (FILL_BYTES_PER_TX / row_size).max(1);
        let mut first = 0;
        while first < rows {
            let count = per_tx.min(rows - first);
            let mut buf = vec![0u8; (count * row_size) as usize];
            for (n, row) in buf.chunks_mut(row_size as usize).enumerate() {
                fill(first + n as u64, row);
            }
            engine.transaction(|tx| tx.write(table, first * row_size, &buf))?;
            first += count;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Checker.
// ---------------------------------------------------------------------------------------

/// Totals over the live order lines and the retired counters.
#[derive(Default)]
struct LineTotals {
    qty: u64,
    lines: u64,
    remote: u64,
    retired_qty: u64,
    retired_lines: u64,
}

/// Rows read per read when scanning a table.
const CHECK_ROWS_PER_READ: u64 = 256;

/// Calls `visit(index, row)` for every row of `table`, reading a chunk of rows at a time.
fn for_each_row<T: Tx>(
    tx: &mut T,
    table: PPtr,
    rows: u64,
    row_size: u64,
    mut visit: impl FnMut(u64, &[u8]) -> TxResult<()>,
) -> TxResult<()> {
    let mut first = 0;
    while first < rows {
        let count = CHECK_ROWS_PER_READ.min(rows - first);
        let mut buf = vec![0u8; (count * row_size) as usize];
        tx.read(table, first * row_size, &mut buf)?;
        for (n, row) in buf.chunks(row_size as usize).enumerate() {
            visit(first + n as u64, row)?;
        }
        first += count;
    }
    Ok(())
}

impl TpccNewOrder {
    fn check_all<T: Tx>(&self, tx: &mut T) -> TxResult<TpccModel> {
        let tables = self.tables(tx)?;
        self.check_warehouses(tx, &tables)?;
        self.check_customers(tx, &tables)?;
        let prices = self.check_items(tx, &tables)?;
        let mut model = self.check_stock(tx, &tables)?;
        let mut totals = LineTotals::default();
        for w in 1..=self.config.warehouses {
            for d in 1..=self.config.districts {
                let orders = self.check_district(tx, &tables, &prices, (w, d), &mut totals)?;
                model.orders.push(orders);
            }
        }
        check_totals(&model, &totals)?;
        Ok(model)
    }

    fn check_warehouses<T: Tx>(&self, tx: &mut T, tables: &Tables) -> TxResult<()> {
        let rows = u64::from(self.config.warehouses);
        for_each_row(tx, tables.warehouses, rows, W_ROW, |index, row| {
            expect_id("warehouse", u32_at(row, W_ID), index as u32 + 1)?;
            in_range("w_tax", u32_at(row, W_TAX), 0..=MAX_TAX).map(drop)
        })
    }

    fn check_customers<T: Tx>(&self, tx: &mut T, tables: &Tables) -> TxResult<()> {
        let per_district = u64::from(self.config.customers);
        let rows = self.config.district_count() * per_district;
        for_each_row(tx, tables.customers, rows, C_ROW, |index, row| {
            let c = (index % per_district) as u32 + 1;
            expect_id("customer", u32_at(row, C_ID), c)?;
            in_range("c_discount", u32_at(row, C_DISCOUNT), 0..=MAX_DISCOUNT)?;
            match &row[C_CREDIT as usize..C_CREDIT as usize + 2] {
                b"GC" | b"BC" => Ok(()),
                other => Err(corrupt(format!("customer {c} has credit {other:?}"))),
            }
        })
    }

    /// Checks the item rows; returns the prices by item index.
    fn check_items<T: Tx>(&self, tx: &mut T, tables: &Tables) -> TxResult<Vec<u32>> {
        let mut prices = Vec::with_capacity(self.config.items as usize);
        let rows = u64::from(self.config.items);
        for_each_row(tx, tables.items, rows, I_ROW, |index, row| {
            expect_id("item", u32_at(row, I_ID), index as u32 + 1)?;
            prices.push(in_range("i_price", u32_at(row, I_PRICE), PRICE_RANGE)?);
            Ok(())
        })?;
        Ok(prices)
    }

    /// Checks the stock rows; returns a model with the stock part filled in.
    fn check_stock<T: Tx>(&self, tx: &mut T, tables: &Tables) -> TxResult<TpccModel> {
        let mut model = TpccModel {
            orders: Vec::with_capacity(self.config.district_count() as usize),
            stock_quantity: Vec::with_capacity(self.config.stock_count() as usize),
            stock_ytd: 0,
            stock_order_cnt: 0,
            stock_remote_cnt: 0,
        };
        let items = u64::from(self.config.items);
        for_each_row(
            tx,
            tables.stock,
            self.config.stock_count(),
            S_ROW,
            |index, row| {
                expect_id(
                    "stock item",
                    u32_at(row, S_I_ID),
                    (index % items) as u32 + 1,
                )?;
                expect_id(
                    "stock warehouse",
                    u32_at(row, S_W_ID),
                    (index / items) as u32 + 1,
                )?;
                let quantity = in_range("s_quantity", u32_at(row, S_QUANTITY), QUANTITY_RANGE)?;
                model.stock_quantity.push(quantity);
                model.stock_ytd = model.stock_ytd.wrapping_add(u64_at(row, S_YTD));
                let order_cnt = u64::from(u32_at(row, S_ORDER_CNT));
                model.stock_order_cnt = model.stock_order_cnt.wrapping_add(order_cnt);
                let remote_cnt = u64::from(u32_at(row, S_REMOTE_CNT));
                model.stock_remote_cnt = model.stock_remote_cnt.wrapping_add(remote_cnt);
                Ok(())
            },
        )?;
        Ok(model)
    }

    /// Checks one district and its live orders; returns the number of orders created.
    fn check_district<T: Tx>(
        &self,
        tx: &mut T,
        tables: &Tables,
        prices: &[u32],
        (w, d): (u32, u32),
        totals: &mut LineTotals,
    ) -> TxResult<u64> {
        let district = self.district(tx, tables, w, d)?;
        let created = district.next_o_id - 1;
        let live = created.min(u64::from(self.config.order_capacity));
        for o_id in created - live + 1..=created {
            self.check_order(tx, &district, prices, (w, d, o_id), totals)?;
        }
        totals.retired_qty = totals.retired_qty.wrapping_add(district.retired_qty);
        totals.retired_lines = totals.retired_lines.wrapping_add(district.retired_lines);
        Ok(created)
    }

    /// Checks a live order, its lines and its new-order entry.
    fn check_order<T: Tx>(
        &self,
        tx: &mut T,
        district: &District,
        prices: &[u32],
        (w, d, o_id): (u32, u32, u64),
        totals: &mut LineTotals,
    ) -> TxResult<()> {
        let slot = self.config.slot(o_id);
        let mut order = [0u8; O_ROW as usize];
        tx.read(district.orders, slot * O_ROW, &mut order)?;
        if u64_at(&order, O_ID) != o_id {
            return Err(corrupt(format!(
                "w{w} d{d}: ring slot {slot} lacks order {o_id}"
            )));
        }
        in_range("o_c_id", u32_at(&order, O_C_ID), 1..=self.config.customers)?;
        let count = in_range("o_ol_cnt", u32_at(&order, O_OL_CNT), self.lines.clone())?;
        let all_local = in_range("o_all_local", u32_at(&order, O_ALL_LOCAL), 0..=1)? == 1;
        let mut rows = vec![0u8; (u64::from(count) * OL_ROW) as usize];
        let lines_at = slot * u64::from(MAX_LINES) * OL_ROW;
        tx.read(district.lines, lines_at, &mut rows)?;
        let mut qty = 0;
        let mut remote = 0;
        for line in rows.chunks(OL_ROW as usize) {
            qty += self.check_line(line, prices)?;
            remote += u64::from(u32_at(line, OL_SUPPLY_W_ID) != w);
        }
        if u64::from(u32_at(&order, O_QTY_SUM)) != qty || all_local != (remote == 0) {
            return Err(corrupt(format!(
                "w{w} d{d} order {o_id}: totals disagree with lines"
            )));
        }
        self.check_new_order(tx, district, (w, d, o_id))?;
        totals.qty += qty;
        totals.lines += u64::from(count);
        totals.remote += remote;
        Ok(())
    }

    /// Checks one order line; returns its quantity.
    fn check_line(&self, line: &[u8], prices: &[u32]) -> TxResult<u64> {
        let item = in_range("ol_i_id", u32_at(line, OL_I_ID), 1..=self.config.items)?;
        in_range(
            "ol_supply_w_id",
            u32_at(line, OL_SUPPLY_W_ID),
            1..=self.config.warehouses,
        )?;
        let quantity = in_range("ol_quantity", u32_at(line, OL_QUANTITY), 1..=MAX_QUANTITY)?;
        let price = prices.get(item as usize - 1).copied().unwrap_or(0);
        let amount = u32_at(line, OL_AMOUNT);
        if amount != quantity * price {
            return Err(corrupt(format!(
                "line of item {item}: amount {amount} ≠ {quantity} × {price}"
            )));
        }
        Ok(u64::from(quantity))
    }

    fn check_new_order<T: Tx>(
        &self,
        tx: &mut T,
        district: &District,
        (w, d, o_id): (u32, u32, u64),
    ) -> TxResult<()> {
        let mut row = [0u8; NO_ROW as usize];
        tx.read(
            district.new_orders,
            self.config.slot(o_id) * NO_ROW,
            &mut row,
        )?;
        let names = (
            u64_at(&row, NO_O_ID),
            u32_at(&row, NO_D_ID),
            u32_at(&row, NO_W_ID),
        );
        if names != (o_id, d, w) {
            return Err(corrupt(format!(
                "new-order entry {names:?} ≠ order ({o_id}, {d}, {w})"
            )));
        }
        Ok(())
    }
}

/// The stock counters must account for every order line ever written.
fn check_totals(model: &TpccModel, totals: &LineTotals) -> TxResult<()> {
    let lines_qty = totals.retired_qty.wrapping_add(totals.qty);
    if model.stock_ytd != lines_qty {
        return Err(corrupt(format!(
            "Σ s_ytd = {} but order lines hold {lines_qty}",
            model.stock_ytd
        )));
    }
    let lines = totals.retired_lines.wrapping_add(totals.lines);
    if model.stock_order_cnt != lines {
        return Err(corrupt(format!(
            "Σ s_order_cnt = {} but {lines} order lines were written",
            model.stock_order_cnt
        )));
    }
    if model.stock_remote_cnt < totals.remote || model.stock_remote_cnt > lines {
        return Err(corrupt(format!(
            "Σ s_remote_cnt = {} outside {}..={lines}",
            model.stock_remote_cnt, totals.remote
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The workload.
// ---------------------------------------------------------------------------------------

impl Workload for TpccNewOrder {
    type Model = TpccModel;

    fn name(&self) -> String {
        format!("tpcc-neworder-{}w", self.config.warehouses)
    }

    fn setup<E: Engine>(&self, engine: &E) -> TxResult<()> {
        let cfg = &self.config;
        let (header, tables) = engine.transaction(|tx| self.allocate(tx))?;
        let customers = cfg.district_count() * u64::from(cfg.customers);
        Self::fill_table(engine, tables.customers, customers, C_ROW, |i, row| {
            self.customer_row(i, row)
        })?;
        Self::fill_table(
            engine,
            tables.items,
            u64::from(cfg.items),
            I_ROW,
            |i, row| self.item_row(i, row),
        )?;
        Self::fill_table(engine, tables.stock, cfg.stock_count(), S_ROW, |i, row| {
            self.stock_row(i, row)
        })?;
        // Linked last: a crash during setup leaves no half-filled database reachable.
        engine.transaction(|tx| set_root_link(tx, header))
    }

    fn run_op<E: Engine>(&self, engine: &E, thread: usize, index: u64) -> TxResult<OpKind> {
        let plan = self.plan(thread, index);
        let _held = self.lock(engine.isolation(), &plan);
        match engine.transaction(|tx| self.execute(tx, &plan)) {
            Ok(_) | Err(NewOrderError::InvalidItem) => Ok(OpKind::Business),
            Err(NewOrderError::Tx(error)) => Err(error),
        }
    }

    fn check<E: Engine>(&self, engine: &E) -> Result<Self::Model, String> {
        engine
            .read_only(|tx| self.check_all(tx))
            .map_err(|e| format!("tpcc: {e}"))
    }

    fn initial_model(&self) -> Self::Model {
        let cfg = &self.config;
        let stock_quantity = (1..=cfg.warehouses)
            .flat_map(|w| (1..=cfg.items).map(move |i| cfg.initial_quantity(w, i)))
            .collect();
        TpccModel {
            orders: vec![0; cfg.district_count() as usize],
            stock_quantity,
            stock_ytd: 0,
            stock_order_cnt: 0,
            stock_remote_cnt: 0,
        }
    }

    fn apply_to_model(&self, model: &mut Self::Model, thread: usize, index: u64) {
        let plan = self.plan(thread, index);
        if plan.rollback {
            return;
        }
        let cfg = &self.config;
        model.orders[cfg.district_index(plan.w, plan.d) as usize] += 1;
        for line in &plan.lines {
            let stock =
                &mut model.stock_quantity[cfg.stock_index(line.supply_w, line.item) as usize];
            *stock = restock(*stock, line.quantity);
            model.stock_ytd += u64::from(line.quantity);
            model.stock_order_cnt += 1;
            model.stock_remote_cnt += u64::from(line.supply_w != plan.w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NURand draws its second term from `1..=n` as TPC-C defines it: on 30 customers the
    /// empirical distribution matches the one enumerated from the formula (chi-square over
    /// 29 degrees of freedom below 70; drawing that term from `0..n` instead gives about
    /// 3000 here).
    #[test]
    fn nurand_follows_the_tpcc_formula() {
        let n = 30;
        let a = nurand_a(n);
        let mut exact = vec![0u64; n as usize + 1];
        for r1 in 0..=a {
            for r2 in 1..=n {
                exact[(((r1 | r2) % n) + 1) as usize] += 1;
            }
        }
        let cases = u64::from(a + 1) * u64::from(n);
        let draws = 300_000u64;
        let mut found = vec![0u64; n as usize + 1];
        for index in 0..draws {
            let value = nurand(&mut op_rng(7, 0, index), n);
            assert!((1..=n).contains(&value), "{value}");
            found[value as usize] += 1;
        }
        let chi: f64 = (1..=n as usize)
            .filter(|&v| exact[v] > 0)
            .map(|v| {
                let expected = draws as f64 * exact[v] as f64 / cases as f64;
                (found[v] as f64 - expected).powi(2) / expected
            })
            .sum();
        assert!(chi < 70.0, "chi-square {chi}");
        assert!((1..=n as usize).all(|v| exact[v] > 0 || found[v] == 0));
    }

    #[test]
    fn restock_follows_the_tpcc_rule() {
        assert_eq!(restock(50, 5), 45);
        assert_eq!(restock(20, 10), 10);
        assert_eq!(restock(19, 10), 100);
        assert_eq!(restock(15, 10), 96);
    }

    #[test]
    fn restock_keeps_quantities_in_range() {
        for stock in QUANTITY_RANGE {
            for quantity in 1..=MAX_QUANTITY {
                assert!(QUANTITY_RANGE.contains(&restock(stock, quantity)));
            }
        }
    }

    #[test]
    fn default_config_is_valid_and_extremes_are_not() {
        assert!(TpccNewOrder::new(TpccConfig::default()).is_ok());
        for config in [
            TpccConfig {
                items: 0,
                ..TpccConfig::default()
            },
            TpccConfig {
                warehouses: 0,
                ..TpccConfig::default()
            },
        ] {
            assert!(TpccNewOrder::new(config).is_err());
        }
    }

    #[test]
    fn smaller_orders_keep_every_invariant() {
        use tx::MemEngine;
        let workload = TpccNewOrder::new(TpccConfig {
            order_capacity: 16,
            ..TpccConfig::default()
        })
        .expect("valid")
        .with_lines(1..=7)
        .expect("within the slots");
        let engine = MemEngine::new(8 << 20);
        workload.setup(&engine).expect("setup");
        let mut model = workload.initial_model();
        for index in 0..400 {
            workload.run_op(&engine, 0, index).expect("op");
            workload.apply_to_model(&mut model, 0, index);
        }
        assert_eq!(workload.check(&engine).expect("consistent"), model);
        assert!((0..400).all(|i| (1..=7).contains(&(workload.plan(0, i).lines.len() as u32))));
        let fresh = || TpccNewOrder::new(TpccConfig::default()).expect("valid");
        assert!(fresh().with_lines(0..=3).is_err());
        assert!(fresh().with_lines(4..=16).is_err());
    }
}
