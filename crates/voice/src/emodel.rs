//! ITU-T G.107 E-model: transmission rating R and MOS.
//!
//! Owns: the formulas only. Must not touch: measurements (see
//! [`crate::stats`]) or codec tables (see [`crate::codec`]).
//!
//! The simplified form used in VoIP studies (Cole & Rosenbluth, "Voice over
//! IP performance monitoring", ACM CCR 2001):
//!
//! ```text
//! R      = R0 - Id - Ie,eff                      R0 = 93.2 (G.107 defaults)
//! Id     = 0.024 d + 0.11 (d - 177.3) H(d - 177.3)
//! Ie,eff = Ie + (95 - Ie) Ppl / (Ppl / BurstR + Bpl)
//! MOS    = 1 + 0.035 R + 7e-6 R (R - 60)(100 - R)  for 0 <= R <= 100
//! ```
//!
//! d is the one-way mouth-to-ear delay (ms), Ppl the packet loss in percent.
//! [`g107`] computes R from the full set of G.107 parameters; with their
//! default values it gives the 93.2 used as R0 (tested).

/// R0 - Is with G.107 default parameters: the rating of a perfect call.
pub const R0_DEFAULT: f64 = 93.2;

/// Delay impairment Id (Cole & Rosenbluth) for a mouth-to-ear delay in ms.
pub fn delay_impairment(d_ms: f64) -> f64 {
    let d = if d_ms.is_finite() {
        d_ms.max(0.0)
    } else {
        f64::MAX
    };
    if d == f64::MAX {
        return 1e9;
    }
    let step = if d > 177.3 { 0.11 * (d - 177.3) } else { 0.0 };
    0.024 * d + step
}

/// Effective equipment impairment Ie,eff (G.107 eq. 7-29) for a loss in
/// percent; BurstR = 1 for random loss. Inputs are clamped to valid ranges.
pub fn effective_ie(ie: f64, bpl: f64, ppl_pct: f64, burst_r: f64) -> f64 {
    let ppl = if ppl_pct.is_finite() {
        ppl_pct.clamp(0.0, 100.0)
    } else {
        100.0
    };
    let burst_r = if burst_r.is_finite() && burst_r >= 1.0 {
        burst_r
    } else {
        1.0
    };
    if ppl == 0.0 {
        return ie;
    }
    ie + (95.0 - ie) * ppl / (ppl / burst_r + bpl)
}

/// MOS (conversational quality estimate) from R (G.107 annex B).
pub fn mos_from_r(r: f64) -> f64 {
    if r.is_nan() || r < 0.0 {
        1.0
    } else if r > 100.0 {
        4.5
    } else {
        // The cubic dips slightly below 1 for R < 6.5; MOS is never below 1.
        (1.0 + 0.035 * r + 7e-6 * r * (r - 60.0) * (100.0 - r)).max(1.0)
    }
}

/// Impairments of one call direction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Impairments {
    /// One-way mouth-to-ear delay (ms).
    pub delay_ms: f64,
    /// Equipment impairment Ie of the codec.
    pub ie: f64,
    /// Packet-loss robustness Bpl of the codec.
    pub bpl: f64,
    /// Packet loss in percent (network plus late loss).
    pub loss_pct: f64,
    /// Burst ratio (1 = random loss).
    pub burst_r: f64,
}

/// R = R0 - Id - Ie,eff.
pub fn r_factor(r0: f64, imp: &Impairments) -> f64 {
    r0 - delay_impairment(imp.delay_ms) - effective_ie(imp.ie, imp.bpl, imp.loss_pct, imp.burst_r)
}

/// The largest packet loss (percent) that keeps R >= `r_min` at a given
/// delay: Ie,eff inverted. `None` if even zero loss does not reach `r_min`.
pub fn max_loss_pct(
    r0: f64,
    r_min: f64,
    delay_ms: f64,
    ie: f64,
    bpl: f64,
    burst_r: f64,
) -> Option<f64> {
    let budget = r0 - delay_impairment(delay_ms) - r_min; // allowed Ie,eff
    let x = budget - ie;
    if x < 0.0 {
        return None;
    }
    let denom = (95.0 - ie) - x / burst_r.max(1.0);
    if denom <= 0.0 {
        return Some(100.0);
    }
    Some((x * bpl / denom).min(100.0))
}

/// The full G.107 (2005-2009 edition) computation of R from its parameters,
/// used to check that R0 - Is with default values is 93.2.
pub mod g107 {
    /// G.107 input parameters (names as in the recommendation, table 2).
    #[derive(Clone, Copy, Debug, PartialEq)]
    #[allow(non_snake_case, missing_docs)]
    pub struct Params {
        pub SLR: f64,
        pub RLR: f64,
        pub STMR: f64,
        pub LSTR: f64,
        pub Ds: f64,
        pub Dr: f64,
        pub TELR: f64,
        pub WEPL: f64,
        pub T: f64,
        pub Tr: f64,
        pub Ta: f64,
        pub qdu: f64,
        pub Ie: f64,
        pub Bpl: f64,
        pub Ppl: f64,
        pub BurstR: f64,
        pub Nc: f64,
        pub Nfor: f64,
        pub Ps: f64,
        pub Pr: f64,
        pub A: f64,
    }

    impl Default for Params {
        /// G.107 table 2 default values.
        fn default() -> Self {
            Params {
                SLR: 8.0,
                RLR: 2.0,
                STMR: 15.0,
                LSTR: 18.0,
                Ds: 3.0,
                Dr: 3.0,
                TELR: 65.0,
                WEPL: 110.0,
                T: 0.0,
                Tr: 0.0,
                Ta: 0.0,
                qdu: 1.0,
                Ie: 0.0,
                Bpl: 1.0,
                Ppl: 0.0,
                BurstR: 1.0,
                Nc: -70.0,
                Nfor: -64.0,
                Ps: 35.0,
                Pr: 35.0,
                A: 0.0,
            }
        }
    }

    fn lg(x: f64) -> f64 {
        x.log10()
    }
    fn p10(x: f64) -> f64 {
        10f64.powf(x / 10.0)
    }

    /// The parts of R.
    #[derive(Clone, Copy, Debug, PartialEq)]
    #[allow(missing_docs)]
    pub struct Rating {
        pub ro: f64,
        pub is: f64,
        pub id: f64,
        pub ie_eff: f64,
        pub r: f64,
    }

    /// R = Ro - Is - Id - Ie,eff + A.
    pub fn rating(p: &Params) -> Rating {
        let olr = p.SLR + p.RLR;
        let nfo = p.Nfor + p.RLR;
        let pre = p.Pr + 10.0 * lg(1.0 + p10(10.0 - p.LSTR));
        let nor = p.RLR - 121.0 + pre + 0.008 * (pre - 35.0).powi(2);
        let nos = p.Ps - p.SLR - p.Ds - 100.0 + 0.004 * (p.Ps - olr - p.Ds - 14.0).powi(2);
        let no = 10.0 * lg(p10(p.Nc) + p10(nos) + p10(nor) + p10(nfo));
        let ro = 15.0 - 1.5 * (p.SLR + no);

        // Simultaneous impairments.
        let xolr = olr + 0.2 * (64.0 + no - p.RLR);
        let iolr = 20.0 * ((1.0 + (xolr / 8.0).powi(8)).powf(1.0 / 8.0) - xolr / 8.0);
        let stmro = -10.0 * lg(p10(-p.STMR) + (-p.T / 4.0).exp() * p10(-p.TELR));
        let ist = 12.0 * (1.0 + ((stmro - 13.0) / 6.0).powi(8)).powf(1.0 / 8.0)
            - 28.0 * (1.0 + ((stmro + 1.0) / 19.4).powi(35)).powf(1.0 / 35.0)
            - 13.0 * (1.0 + ((stmro - 3.0) / 33.0).powi(13)).powf(1.0 / 13.0)
            + 29.0;
        let q = 37.0 - 15.0 * lg(p.qdu);
        let g = 1.07 + 0.258 * q + 0.0602 * q * q;
        let y = (ro - 100.0) / 15.0 + 46.0 / 8.4 - g / 9.0;
        let z = 46.0 / 30.0 - g / 40.0;
        let iq = 15.0 * lg(1.0 + 10f64.powf(y) + 10f64.powf(z));
        let is = iolr + ist + iq;

        // Delay impairments.
        let terv = p.TELR - 40.0 * lg((1.0 + p.T / 10.0) / (1.0 + p.T / 150.0))
            + 6.0 * (-0.3 * p.T * p.T).exp();
        let re = 80.0 + 2.5 * (terv - 14.0);
        let roe = -1.5 * (no - p.RLR);
        let idte = ((roe - re) / 2.0 + ((roe - re).powi(2) / 4.0 + 100.0).sqrt() - 1.0)
            * (1.0 - (-p.T).exp());
        let rle = 10.5 * (p.WEPL + 7.0) * (p.Tr + 1.0).powf(-0.25);
        let idle = (ro - rle) / 2.0 + ((ro - rle).powi(2) / 4.0 + 169.0).sqrt();
        let idd = if p.Ta <= 100.0 {
            0.0
        } else {
            let x = lg(p.Ta / 100.0) / lg(2.0);
            25.0 * ((1.0 + x.powi(6)).powf(1.0 / 6.0)
                - 3.0 * (1.0 + (x / 3.0).powi(6)).powf(1.0 / 6.0)
                + 2.0)
        };
        let id = idte + idle + idd;
        let ie_eff = super::effective_ie(p.Ie, p.Bpl, p.Ppl, p.BurstR);
        Rating {
            ro,
            is,
            id,
            ie_eff,
            r: ro - is - id - ie_eff + p.A,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn g107_defaults_give_93_2() {
        let r = g107::rating(&g107::Params::default());
        assert!(close(r.r, 93.2, 0.05), "{r:?}");
        assert!(close(r.ro, 94.77, 0.01), "{r:?}");
        assert!(close(r.is, 1.41, 0.01), "{r:?}");
        assert!(close(r.id, 0.15, 0.01), "{r:?}");
        assert!(close(R0_DEFAULT, r.r, 0.05));
        // And MOS 4.41 for it.
        assert!(close(mos_from_r(r.r), 4.41, 0.005));
    }

    #[test]
    fn g107_delay_terms_grow_with_delay() {
        let base = g107::rating(&g107::Params::default());
        let p = g107::Params {
            T: 150.0,
            Ta: 150.0,
            Tr: 300.0,
            ..Default::default()
        };
        let slow = g107::rating(&p);
        assert!(slow.id > base.id + 1.0, "{slow:?}");
        assert_eq!(slow.ro, base.ro);
    }

    #[test]
    fn mos_reference_points() {
        assert!(close(mos_from_r(93.2), 4.41, 0.005));
        assert!(close(mos_from_r(70.0), 3.60, 0.005));
        assert!(close(
            mos_from_r(70.0),
            1.0 + 2.45 + 7e-6 * 70.0 * 10.0 * 30.0,
            1e-12
        ));
        assert_eq!(mos_from_r(-5.0), 1.0);
        assert_eq!(mos_from_r(f64::NAN), 1.0);
        assert_eq!(mos_from_r(101.0), 4.5);
        assert!(close(mos_from_r(100.0), 4.5, 1e-12));
        assert!(close(mos_from_r(0.0), 1.0, 1e-12));
        assert_eq!(mos_from_r(3.0), 1.0); // the cubic would give 0.99
                                          // Monotonic over the range.
        let mut last = 0.0;
        for i in 0..=1000 {
            let m = mos_from_r(i as f64 / 10.0);
            assert!(m >= last);
            last = m;
        }
    }

    #[test]
    fn delay_impairment_knee() {
        assert_eq!(delay_impairment(0.0), 0.0);
        assert!(close(delay_impairment(100.0), 2.4, 1e-12));
        assert!(close(delay_impairment(177.3), 0.024 * 177.3, 1e-12));
        assert!(close(delay_impairment(277.3), 0.024 * 277.3 + 11.0, 1e-9));
        assert_eq!(delay_impairment(-3.0), 0.0);
        assert!(delay_impairment(f64::INFINITY) > 1000.0);
    }

    #[test]
    fn reference_example_g729a_150ms_1pct() {
        let imp = Impairments {
            delay_ms: 150.0,
            ie: 11.0,
            bpl: 19.0,
            loss_pct: 1.0,
            burst_r: 1.0,
        };
        let r = r_factor(R0_DEFAULT, &imp);
        // 93.2 - 3.6 - (11 + 84 * 1 / 20) = 74.4
        assert!(close(r, 74.4, 1e-9), "{r}");
        assert!(close(mos_from_r(r), 3.80, 0.005), "{}", mos_from_r(r));
    }

    #[test]
    fn largest_loss_keeping_r70_at_100ms() {
        let g711 = max_loss_pct(R0_DEFAULT, 70.0, 100.0, 0.0, 25.1, 1.0).unwrap();
        let g729 = max_loss_pct(R0_DEFAULT, 70.0, 100.0, 11.0, 19.0, 1.0).unwrap();
        assert!(close(g711, 7.0, 0.1), "{g711}");
        assert!(close(g729, 2.5, 0.05), "{g729}");
        // Inverse check: R at that loss is 70.
        for (ie, bpl, p) in [(0.0, 25.1, g711), (11.0, 19.0, g729)] {
            let r = r_factor(
                R0_DEFAULT,
                &Impairments {
                    delay_ms: 100.0,
                    ie,
                    bpl,
                    loss_pct: p,
                    burst_r: 1.0,
                },
            );
            assert!(close(r, 70.0, 1e-9), "{r}");
        }
        // Bursty loss hurts: the allowed loss shrinks.
        let bursty = max_loss_pct(R0_DEFAULT, 70.0, 100.0, 11.0, 19.0, 2.0).unwrap();
        assert!(bursty < g729);
        // A delay so large that even no loss misses R = 70.
        assert_eq!(max_loss_pct(R0_DEFAULT, 70.0, 400.0, 11.0, 19.0, 1.0), None);
    }

    #[test]
    fn effective_ie_limits() {
        assert_eq!(effective_ie(11.0, 19.0, 0.0, 1.0), 11.0);
        assert!(close(
            effective_ie(11.0, 19.0, 100.0, 1.0),
            11.0 + 84.0 * 100.0 / 119.0,
            1e-9
        ));
        assert!(effective_ie(0.0, 25.1, 1e9, 1.0) < 95.0);
        assert!(effective_ie(0.0, 25.1, f64::NAN, 1.0) > 75.0);
        assert!(effective_ie(0.0, 4.3, 5.0, 1.0) > effective_ie(0.0, 25.1, 5.0, 1.0));
    }
}
