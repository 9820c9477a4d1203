"""Paper A's primary protocol and estimands, fixed before the sweeps that test them.

docs/statistics.md ("Paper A: the primary protocol") says why each value was chosen. The
relation sweep reads these constants for ``--protocol primary``; every other protocol is a
sensitivity analysis printed beside the headline, never the headline.

Estimands, all on the achieved slicing fraction s = 1 − d′/d (SliceGPT rounds d′ down to a
multiple of 8, so the nominal s differs by up to 11% at small s on d = 576) and on
L(s) = ln PPL(s), the mean NLL in nats over the evaluation windows:

1. the joint test of (A1) in the nesting law L/L₀ = 1 + κ·s + κ₂·s²/(1 − s), where (A1) is
   κ = κ₂ = 1: Wald statistic W = (θ̂ − 1)ᵀ Σ̂⁻¹ (θ̂ − 1) with Σ̂ the two-level bootstrap
   covariance of θ̂ = (κ̂, κ̂₂) fitted on every s > 0; p = P(χ²₂ > W); rejected when p < ALPHA;
2. the local first order: κ of the same nesting law fitted on 0 < s ≤ LOCAL_SMAX only
   (unbiased under (A1) and under a linear NLL alike, where a straight line through the
   origin would read (A1) itself as κ ≈ 1.1), read against 1 ± KAPPA_TOL;
3. out-of-sample prediction: leave-one-s-out over s > 0, and extrapolation from
   s ≤ EXTRAPOLATE_FROM to every larger s; laws compared by paired bootstrap differences.
"""

from __future__ import annotations

from types import MappingProxyType

PRIMARY = "primary"

# The s grid: small s added where the first order lives. s = 0 is the dense model's own
# evaluation (no slice run: SliceGPT's rotation at s = 0 reproduces it to float precision).
GRID = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6)

# Calibration seeds per model (fresh seeds: 42, SliceGPT's default, was used before).
SEEDS = MappingProxyType({"smollm2-135m": (0, 1, 2, 3, 4), "gemma3-270m": (0, 1, 2)})
MIN_SEEDS = 3  # any other model

# Evaluation: WikiText-2 test as the reference code cuts it, 2048-token windows (SliceGPT's
# and the paper's length; both packaged models' contexts allow it), the first 16 windows
# (32,768 tokens: the token budget of the earlier 64 x 512 protocol).
EVAL_DATASET = "wikitext2"
EVAL_SPLIT = "test"
EVAL_SEQLEN = 2048
EVAL_WINDOWS = 16

# Calibration: WikiText-2 train (SliceGPT's corpus), random windows of random documents, 32
# sequences of 512 tokens (the project's reference size; 16 and 64 x 512 were measured not to
# move κ beyond its interval).
CALIB_DATASET = "wikitext2"
CALIB_SAMPLER = "window"
CALIB_NSAMPLES = 32
CALIB_SEQLEN = 512

MEASURE = "lean"  # perplexity and kept parameters: what the estimands read

# Fits are made on s_eff; which points a range holds is read on the nominal grid (s = 0.15
# is 0.153 on d = 576 once rounded, and belongs to the local range).
BASIS = "s_eff"  # the achieved fraction 1 − d′/d; the nominal s is a sensitivity analysis
LOCAL_SMAX = 0.15  # the local first order's points: nominal 0 < s ≤ 0.15 (five)
EXTRAPOLATE_FROM = 0.2  # extrapolation: fitted on nominal s ≤ 0.2, scored on every larger s
KAPPA_TOL = 0.1  # first order agrees when κ's interval lies inside 1 ± 0.1
ALPHA = 0.05  # the joint test's level
FIT_RANGES = (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6)  # κ against s_max, the sensitivity display
