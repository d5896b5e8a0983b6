//! Fairness across streams: Jain's index, the smallest and largest share, and starvation
//! (a stream that read nothing while others read: a span in which none did is a stall,
//! not unfairness). Pure functions over byte counts.

use super::model::Fairness;

/// Fairness of one span from each stream's bytes.
pub fn of(bytes: &[u64]) -> Fairness {
    let n = bytes.len();
    let total: f64 = bytes.iter().map(|&b| b as f64).sum();
    if n == 0 || total == 0.0 {
        return Fairness {
            jain: None,
            min_share: None,
            max_share: None,
            starved: 0,
            streams: n as u32,
        };
    }
    let starved = bytes.iter().filter(|&&b| b == 0).count() as u32;
    let squares: f64 = bytes.iter().map(|&b| (b as f64) * (b as f64)).sum();
    let min = bytes.iter().copied().min().unwrap_or(0) as f64;
    let max = bytes.iter().copied().max().unwrap_or(0) as f64;
    Fairness {
        jain: Some(total * total / (n as f64 * squares)),
        min_share: Some(min / total),
        max_share: Some(max / total),
        starved,
        streams: n as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-12)
    }

    #[test]
    fn equal_streams_are_perfectly_fair() {
        let f = of(&[100, 100, 100, 100]);
        assert!(close(f.jain, 1.0));
        assert!(close(f.min_share, 0.25) && close(f.max_share, 0.25));
        assert_eq!(f.starved, 0);
    }

    #[test]
    fn one_active_stream_of_n_scores_one_over_n() {
        for n in [2usize, 4, 8, 16] {
            let mut bytes = vec![0u64; n];
            bytes[n - 1] = 12345;
            let f = of(&bytes);
            assert!(close(f.jain, 1.0 / n as f64), "n={n}: {:?}", f.jain);
            assert!(close(f.min_share, 0.0) && close(f.max_share, 1.0));
            assert_eq!(f.starved, n as u32 - 1);
        }
    }

    #[test]
    fn known_values_and_empty_spans() {
        // (1+3)^2 / (2 * (1+9)) = 0.8
        assert!(close(of(&[1, 3]).jain, 0.8));
        let f = of(&[0, 0, 0]);
        // Nobody read: a stall, not three starved streams (nor one with -P 1).
        assert_eq!((f.jain, f.starved, f.streams), (None, 0, 3));
        assert_eq!(of(&[0]).starved, 0);
        assert_eq!(of(&[0, 5]).starved, 1);
        assert_eq!(of(&[]).jain, None);
    }
}
