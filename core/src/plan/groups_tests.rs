//! Layer groups in the configuration and the planner: bad input, one group as before, Gemma 3
//! 270M's shape.

use crate::config::{CacheConfig, GroupWindow, LayerGroup, Layers, MAX_GROUPS};
use crate::error::ConfigError;
use crate::format::ElementFormat;
use crate::shape::Shape;

const GEMMA: Shape = Shape {
    layers: 18,
    kv_heads: 1,
    head_dim: 256,
};
const MIB4: usize = 4 << 20;

/// Gemma 3 270M: layers 5, 11, 17 global, the others windowed over 512 positions.
fn gemma(format: ElementFormat) -> CacheConfig {
    CacheConfig::new(GEMMA)
        .with_formats(format, format)
        .with_sequences(1, 32768)
        .with_window(GroupWindow::new(512, 0))
        .with_group(
            LayerGroup::new(Layers::Every {
                period: 6,
                first: 5,
            })
            .with_formats(format, format),
        )
}

#[test]
fn layers_route_to_their_group_in_model_order() {
    let cfg = gemma(ElementFormat::F32);
    assert_eq!(cfg.group_count(), 2);
    assert_eq!(cfg.group_layers(0), 15);
    assert_eq!(cfg.group_layers(1), 3);
    assert_eq!(cfg.group_layers(2), 0);
    assert_eq!(cfg.layer_group(0), Some((0, 0)));
    assert_eq!(cfg.layer_group(4), Some((0, 4)));
    assert_eq!(cfg.layer_group(5), Some((1, 0)));
    assert_eq!(cfg.layer_group(6), Some((0, 5)));
    assert_eq!(cfg.layer_group(11), Some((1, 1)));
    assert_eq!(cfg.layer_group(17), Some((1, 2)));
    assert_eq!(cfg.layer_group(16), Some((0, 14)));
    assert_eq!(cfg.layer_group(18), None);
    assert_eq!(cfg.group(0).unwrap().layers, Layers::Rest);
    assert_eq!(cfg.group(0).unwrap().window, Some(GroupWindow::new(512, 0)));
    assert_eq!(cfg.group(1).unwrap().window, None);
    assert!(cfg.group(2).is_none());
    // Without listed groups: one group of every layer, as before.
    let one = CacheConfig::new(GEMMA);
    assert_eq!(one.group_count(), 1);
    assert_eq!(one.layer_group(17), Some((0, 17)));
    assert_eq!(one.group_layers(0), 18);
}

#[test]
fn bad_groups_are_precise_errors() {
    let base = CacheConfig::new(GEMMA);
    let run = |first, count| LayerGroup::new(Layers::Run { first, count });
    let cases: [(CacheConfig, ConfigError); 10] = [
        (base.with_group(run(0, 0)), ConfigError::ZeroSize),
        (
            base.with_group(LayerGroup::new(Layers::Every {
                period: 0,
                first: 1,
            })),
            ConfigError::ZeroSize,
        ),
        (
            base.with_group(run(17, 2)),
            ConfigError::GroupLayerOutOfRange,
        ),
        (
            base.with_group(LayerGroup::new(Layers::Every {
                period: 6,
                first: 18,
            })),
            ConfigError::GroupLayerOutOfRange,
        ),
        (
            base.with_group(run(0, 4)).with_group(run(3, 2)),
            ConfigError::LayerInTwoGroups,
        ),
        (base.with_group(run(0, 18)), ConfigError::EmptyGroup),
        (
            base.with_group(LayerGroup::new(Layers::Rest)),
            ConfigError::InvalidGroup,
        ),
        (
            base.with_window(GroupWindow::new(0, 4)),
            ConfigError::ZeroSize,
        ),
        (
            base.with_group(run(0, 1).with_window(GroupWindow::new(0, 0))),
            ConfigError::ZeroSize,
        ),
        (
            base.with_group(run(0, 1))
                .with_group(run(1, 1))
                .with_group(run(2, 1))
                .with_group(run(3, 1)),
            ConfigError::TooManyGroups,
        ),
    ];
    for (cfg, err) in cases {
        assert_eq!(cfg.check_groups(), Err(err), "{cfg:?}");
        assert_eq!(cfg.geometry(), Err(err));
        assert_eq!(cfg.plan_groups(MIB4, 16), Err(err));
        assert_eq!(cfg.group_geometry(0), Err(err));
    }
    // MAX_GROUPS groups are fine.
    let mut full = base;
    for l in 0..MAX_GROUPS as u16 - 1 {
        full = full.with_group(run(l, 1));
    }
    assert_eq!(full.check_groups(), Ok(()));
    assert_eq!(full.group_count(), MAX_GROUPS);
    // Several groups: one-group calls refuse them precisely.
    let two = base.with_group(run(0, 1));
    assert_eq!(two.geometry(), Err(ConfigError::MultipleGroups));
    assert_eq!(two.plan(MIB4, 16), Err(ConfigError::MultipleGroups));
    assert_eq!(two.plan_pages(4, 16), Err(ConfigError::MultipleGroups));
    assert_eq!(two.group_geometry(2), Err(ConfigError::EmptyGroup));
}

#[test]
fn one_group_plans_as_before() {
    for cfg in [
        CacheConfig::new(GEMMA).with_formats(ElementFormat::Q4_0, ElementFormat::Q8_0),
        CacheConfig::new(GEMMA).with_window(GroupWindow::new(64, 4)),
    ] {
        let grouped = cfg.plan_groups(MIB4, 16).unwrap();
        let plan = cfg.plan(MIB4, 16).unwrap();
        assert_eq!(grouped.group_count(), 1);
        assert_eq!(grouped.group(0), Some(&plan));
        assert_eq!(grouped.data_offset(0), Some(0));
        assert_eq!(grouped.data_bytes, plan.data_bytes);
        assert_eq!(grouped.meta_bytes, plan.meta.total);
        assert_eq!(cfg.group_geometry(0), cfg.geometry());
    }
    // Without a window, the page table is capped by the pool; with one it spans the sequence.
    let global = CacheConfig::new(GEMMA).plan(MIB4, 16).unwrap();
    assert_eq!(global.table_len, global.num_pages as usize);
    let windowed = CacheConfig::new(GEMMA)
        .with_window(GroupWindow::new(64, 4))
        .plan(MIB4, 16)
        .unwrap();
    assert_eq!(windowed.table_len, 8192 / 16);
}

#[test]
fn window_bounds_pages_per_sequence() {
    // ⌈(512 + 16 − 2) / 16⌉ + 1 = 34 pages for a window of 512 reserved a page at a time.
    assert_eq!(
        GroupWindow::new(512, 0).pages_per_sequence(16, 16),
        Some(34)
    );
    // Sinks add their pages, rollback its positions, chunks theirs.
    assert_eq!(
        GroupWindow::new(512, 4).pages_per_sequence(16, 16),
        Some(35)
    );
    let rb = GroupWindow {
        rollback: 32,
        ..GroupWindow::new(512, 0)
    };
    assert_eq!(rb.pages_per_sequence(16, 16), Some(36));
    assert_eq!(
        GroupWindow::new(512, 0).pages_per_sequence(16, 64),
        Some(37)
    );
    assert_eq!(GroupWindow::new(0, 0).pages_per_sequence(16, 16), None);
    assert_eq!(GroupWindow::new(1, 0).pages_per_sequence(16, 16), Some(2));
}

#[test]
fn gemma3_in_4_mib_holds_at_least_2_5x_the_all_global_context_at_q4_0() {
    let cfg = gemma(ElementFormat::Q4_0);
    let plan = cfg.plan_groups(MIB4, 16).unwrap();
    let global = cfg.without_windows().plan_groups(MIB4, 16).unwrap();
    // Windowed: 34 pages of 15 layers; the global group the rest.
    let w = plan.group(0).unwrap();
    let g = plan.group(1).unwrap();
    assert_eq!(w.num_pages, 34);
    assert_eq!(w.geometry.layers, 15);
    assert_eq!(g.geometry.layers, 3);
    assert_eq!(plan.data_offset(1), Some(w.data_bytes));
    assert!(plan.data_bytes <= MIB4);
    assert_eq!(plan.context_tokens, g.num_pages as u32 * 16);
    // All global: both groups hold the same pages.
    assert_eq!(
        global.group(0).unwrap().num_pages,
        global.group(1).unwrap().num_pages
    );
    assert!(
        plan.context_tokens as f64 >= 2.5 * global.context_tokens as f64,
        "{} vs {}",
        plan.context_tokens,
        global.context_tokens
    );
    assert_eq!((plan.context_tokens, global.context_tokens), (2128, 800));
}

#[test]
fn context_figures_per_format() {
    let formats = [
        ("f32", ElementFormat::F32),
        ("f16", ElementFormat::F16),
        ("q8_0", ElementFormat::Q8_0),
        ("q4_0", ElementFormat::Q4_0),
    ];
    for (name, f) in formats {
        let cfg = gemma(f);
        let w = cfg.plan_groups(MIB4, 16).unwrap().context_tokens;
        let g = cfg
            .without_windows()
            .plan_groups(MIB4, 16)
            .unwrap()
            .context_tokens;
        std::println!("gemma3-270m 4 MiB {name}: windowed {w}, all-global {g}");
        assert!(w >= g);
    }
}

#[test]
fn all_windowed_groups_take_what_fits() {
    let q4 = ElementFormat::Q4_0;
    let cfg = CacheConfig::new(GEMMA)
        .with_formats(q4, q4)
        .with_window(GroupWindow::new(64, 0))
        .with_group(
            LayerGroup::new(Layers::Run { first: 0, count: 9 })
                .with_formats(q4, q4)
                .with_window(GroupWindow::new(128, 0)),
        );
    let plan = cfg.plan_groups(MIB4, 16).unwrap();
    let (a, b) = (plan.group(0).unwrap(), plan.group(1).unwrap());
    assert_eq!(a.num_pages, b.num_pages);
    assert!(plan.data_bytes <= MIB4);
    // Both hold their bound: the context is the configured longest sequence.
    assert_eq!(plan.context_tokens, 8192);
    assert_eq!(cfg.plan_groups(100, 16), Err(ConfigError::ArenaTooSmall));
}

#[test]
fn bytes_for_a_grouped_context() {
    let cfg = gemma(ElementFormat::Q4_0);
    // The context a 4 MiB arena gives needs no more than 4 MiB, and one more page of the
    // global group more.
    let plan = cfg.plan_groups(MIB4, 16).unwrap();
    let need = cfg.plan_groups_for(plan.context_tokens, 1, 16).unwrap();
    assert!(need.data_bytes <= plan.data_bytes);
    assert_eq!(need.context_tokens, plan.context_tokens);
    assert_eq!(need.group(0).unwrap().num_pages, 34);
    assert_eq!(need.group(1).unwrap().num_pages, 2128 / 16);
    // A context inside the window: every group holds all of it.
    let short = cfg.plan_groups_for(100, 1, 16).unwrap();
    assert_eq!(short.group(0).unwrap().num_pages, 7);
    assert_eq!(short.group(1).unwrap().num_pages, 7);
    assert_eq!(
        cfg.plan_groups_for(0, 1, 16).map(|p| p.data_bytes),
        Err(ConfigError::ZeroSize)
    );
    assert_eq!(
        cfg.plan_groups_for(16, 2, 16).map(|p| p.data_bytes),
        Err(ConfigError::Overflow)
    );
}
