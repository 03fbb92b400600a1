//! The statistics behind the detections: an exponentially weighted moving
//! mean and variance (a baseline), and the median absolute deviation.

use serde::{Deserialize, Serialize};

/// An exponentially weighted moving mean and variance of one metric, with
/// the number of values it learned.
///
/// ```
/// use weir::topologies::datacenter_monitor::stats::Baseline;
/// let mut b = Baseline::default();
/// for x in [10.0, 10.0, 10.0] { b.learn(x, 0.2); }
/// assert_eq!(b.mean, 10.0);
/// assert_eq!(b.score(10.0, 0.1), 0.0);
/// assert!((b.score(14.0, 0.1) - 4.0).abs() < 1e-9); // deviation floored at 10 % of the mean
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// The moving mean.
    pub mean: f64,
    /// The moving variance.
    pub var: f64,
    /// Values learned.
    pub learned: u32,
}

impl Baseline {
    /// Folds `x` in with weight `alpha` (the first value sets the mean).
    pub fn learn(&mut self, x: f64, alpha: f64) {
        if self.learned == 0 {
            self.mean = x;
            self.var = 0.0;
        } else {
            let d = x - self.mean;
            self.mean += alpha * d;
            self.var = (1.0 - alpha) * (self.var + alpha * d * d);
        }
        self.learned = self.learned.saturating_add(1);
    }

    /// How many deviations `x` is from the mean, where a deviation is the
    /// standard deviation but at least `min_std_fraction` × |mean| (and a
    /// tiny absolute floor, so a constant metric does not divide by zero).
    pub fn score(&self, x: f64, min_std_fraction: f64) -> f64 {
        self.score_with_floor(x, min_std_fraction, 1e-9)
    }

    /// [`Self::score`] with an absolute smallest deviation `floor`.
    pub fn score_with_floor(&self, x: f64, min_std_fraction: f64, floor: f64) -> f64 {
        let std = self
            .var
            .sqrt()
            .max(min_std_fraction * self.mean.abs())
            .max(floor);
        (x - self.mean).abs() / std
    }
}

/// The median of `values` (sorted in place); `None` when empty.
pub fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

/// The median and the median absolute deviation of `values`.
///
/// ```
/// use weir::topologies::datacenter_monitor::stats::median_and_mad;
/// assert_eq!(median_and_mad(&[1.0, 2.0, 3.0, 4.0, 100.0]), Some((3.0, 1.0)));
/// ```
pub fn median_and_mad(values: &[f64]) -> Option<(f64, f64)> {
    let mut v = values.to_vec();
    let m = median(&mut v)?;
    let mut deviations: Vec<f64> = values.iter().map(|x| (x - m).abs()).collect();
    let mad = median(&mut deviations)?;
    Some((m, mad))
}
