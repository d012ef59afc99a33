// The Gemma 3 board demo's script (documented at `pub mod gemma_script` in lib.rs): plain `//`
// comments here, because `model/tests/gemma_demo_ids.rs` `include!`s this file, where inner doc
// comments are not allowed.

/// The shared document (a greenhouse's weekly log): the prefix every request continues, whose KV
/// the snapshot image holds. The GGUF is Gemma 3 270M's pretrained checkpoint, which continues
/// plain text well (and answers chat prompts poorly), so the requests complete the document.
pub const DOCUMENT: &str = "Greenhouse 3 — operations log, week 14

Monday. The morning check found the north vents stuck half open after the overnight storm. The actuator on vent N2 had tripped its breaker; resetting it closed the vent, but it opened again at 7:40 when the temperature passed 24 degrees, which is the new setpoint. Soil moisture in bed A (tomatoes) read 22 percent, below the 30 percent target, so the drip schedule for bed A was raised from ten to fourteen minutes per cycle. Bed B (lettuce) and bed C (basil) were within their ranges. The water tank was refilled from 35 to 90 percent.

Tuesday. Humidity stayed above 85 percent until noon. We ran the circulation fans for an extra hour and removed the lower leaves of the tomato plants to improve air flow. Two basil plants near the door showed yellow spots; they were moved to the quarantine bench and a sample was bagged for the lab. The CO2 sensor in the east bay drifted by about 60 ppm against the handheld meter and was recalibrated.

Wednesday. The lab called: the basil spots are downy mildew. All basil in bed C was sprayed with the approved copper treatment, and the watering was moved to the morning so the leaves dry before night. The tomato trusses on rows 1 to 4 were tied up, and the first ripe fruit was picked: 3.2 kilograms. Bed A moisture is back to 31 percent.

Thursday. A cold front brought the outside temperature down to 4 degrees. The heaters ran from 2:00 to 6:30 and used 41 liters of fuel. The fan in the east bay makes a grinding noise at full speed; the bearing should be replaced before the summer. Lettuce in bed B was harvested (58 heads) and the bed was replanted with a new batch of seedlings.

Friday. Inspection by the cooperative's advisor. She agreed with the mildew treatment, asked us to log the leaf wetness hours every day, and suggested raising the night temperature of the tomato bay to 17 degrees. The drip line in bed C had two clogged emitters, which were cleaned. The weekly fertilizer was mixed at 1.8 mS/cm and applied to beds A and B. The next visit is planned for May.

";

/// BOS (2) and [`DOCUMENT`]'s token ids: 496 positions, 31 whole pages of 16.
pub const DOCUMENT_IDS: [u32; 496] = [
    2, 17224, 6367, 236743, 236800, 2192, 6675, 2212, 236764, 2069, 236743, 236770, 236812, 108,
    49381, 236761, 669, 5597, 2426, 1765, 506, 8339, 79662, 17539, 3746, 1932, 1308, 506, 24602,
    12978, 236761, 669, 70813, 580, 6771, 646, 236778, 1053, 189947, 1061, 70216, 236793, 133272,
    625, 6535, 506, 6771, 236764, 840, 625, 8678, 1570, 657, 236743, 236832, 236787, 236812,
    236771, 1056, 506, 4022, 6915, 236743, 236778, 236812, 10674, 236764, 837, 563, 506, 861, 1076,
    3947, 236761, 48196, 20511, 528, 4086, 562, 568, 29828, 15202, 236768, 1676, 236743, 236778,
    236778, 3591, 236764, 3426, 506, 236743, 236800, 236771, 3591, 3328, 236764, 834, 506, 73333,
    10368, 573, 4086, 562, 691, 8675, 699, 3595, 531, 53590, 4310, 810, 8881, 236761, 18068, 603,
    568, 1184, 11372, 588, 236768, 532, 4086, 565, 568, 10162, 543, 236768, 964, 2351, 910, 21280,
    236761, 669, 1813, 10886, 691, 2123, 5388, 699, 236743, 236800, 236810, 531, 236743, 236819,
    236771, 3591, 236761, 108, 55703, 236761, 208719, 20246, 2787, 236743, 236828, 236810, 3591,
    3097, 37170, 236761, 1191, 11536, 506, 21051, 7807, 573, 614, 4481, 6468, 532, 8476, 506, 3718,
    6895, 529, 506, 30336, 6485, 531, 4006, 2634, 2727, 236761, 8512, 46590, 6485, 3541, 506, 5232,
    6418, 7070, 16746, 236793, 901, 964, 7808, 531, 506, 40928, 13606, 532, 496, 5498, 691, 137826,
    573, 506, 4796, 236761, 669, 2671, 236778, 13064, 528, 506, 13512, 15158, 126928, 684, 1003,
    236743, 236825, 236771, 52460, 2342, 506, 81137, 19119, 532, 691, 70052, 170770, 236761, 108,
    58189, 236761, 669, 4796, 2760, 236787, 506, 46590, 16746, 659, 1679, 236762, 125980, 236761,
    2343, 46590, 528, 4086, 565, 691, 81479, 607, 506, 10833, 14561, 4269, 236764, 532, 506, 56661,
    691, 7808, 531, 506, 5597, 834, 506, 6895, 6299, 1680, 3446, 236761, 669, 30336, 194416, 580,
    12773, 236743, 236770, 531, 236743, 236812, 964, 19240, 872, 236764, 532, 506, 1171, 35923,
    9479, 691, 14917, 236787, 236743, 236800, 236761, 236778, 82929, 236761, 18068, 562, 20511,
    563, 1063, 531, 236743, 236800, 236770, 3591, 236761, 108, 54904, 236761, 562, 7445, 3645,
    6111, 506, 4782, 4022, 1679, 531, 236743, 236812, 10674, 236761, 669, 77560, 11536, 699,
    236743, 236778, 236787, 236771, 236771, 531, 236743, 236825, 236787, 236800, 236771, 532, 1456,
    236743, 236812, 236770, 66795, 529, 7611, 236761, 669, 8340, 528, 506, 13512, 15158, 3590, 496,
    43493, 9168, 657, 2587, 4249, 236793, 506, 18752, 1374, 577, 12043, 1680, 506, 5312, 236761,
    236152, 528, 4086, 603, 691, 45869, 568, 236810, 236828, 15005, 236768, 532, 506, 4086, 691,
    4932, 17084, 607, 496, 861, 12539, 529, 52853, 236761, 108, 45262, 236761, 64226, 684, 506,
    41519, 236789, 236751, 39031, 236761, 2625, 10344, 607, 506, 125980, 4269, 236764, 4733, 775,
    531, 2212, 506, 11463, 11474, 1788, 3885, 1418, 1719, 236764, 532, 10340, 18494, 506, 3446,
    4022, 529, 506, 30336, 15158, 531, 236743, 236770, 236832, 10674, 236761, 669, 73333, 1757,
    528, 4086, 565, 1053, 1156, 117107, 140086, 236764, 837, 964, 30734, 236761, 669, 16789, 46363,
    691, 9726, 657, 236743, 236770, 236761, 236828, 520, 236773, 236786, 3696, 532, 6055, 531,
    21622, 562, 532, 603, 236761, 669, 2148, 3517, 563, 13015, 573, 3353, 236761, 108,
];

/// The demo's requests: text, token ids (the document's ids followed by these are the ids of the
/// document followed by the text), tokens to generate at most, whether it starts a new request
/// (which reuses the document's pages through the prefix index). The first continues the
/// restored document past position 512.
pub const REQUESTS: [(&str, &[u32], u32, bool); 2] = [
    (
        "Open items for next week:\n1.",
        &[7084, 4852, 573, 2148, 2069, 236787, 107, 236770, 236761],
        40,
        false,
    ),
    (
        "Summary of the week for the cooperative's newsletter:\n",
        &[
            24355, 529, 506, 2069, 573, 506, 41519, 236789, 236751, 27715, 236787, 107,
        ],
        24,
        true,
    ),
];

/// End of text (`<eos>`): ends a continuation.
pub const STOP: [u32; 1] = [1];
