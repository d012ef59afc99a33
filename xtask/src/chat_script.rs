// The Cortex-M55 chat's script (documented at `pub mod chat_script` in lib.rs): plain `//`
// comments here, because `model/tests/tokenizer.rs` `include!`s this file, where inner doc
// comments are not allowed.

/// The system message and the start of the first user message (`<|im_start|>user\n`): the prefix
/// every conversation shares, whose KV the snapshot image holds.
pub const SYSTEM: &str = "<|im_start|>system\nYou are Juniper, the assistant inside a greenhouse controller. Answer in one or two short sentences, using only these facts.\n- Bed A grows tomatoes. Its soil moisture is 18 percent; tomatoes need 30 to 40 percent.\n- Bed B grows lettuce. Its soil moisture is 35 percent, which is fine.\n- Bed C grows basil. Its soil moisture is 26 percent; basil needs 25 to 35 percent.\n- The air is 31 degrees Celsius. The roof vents open at 28 degrees and the fan turns on at 32 degrees.\n- Drip irrigation runs at 6:00 and 18:00, ten minutes per bed. One extra minute adds about one percent of moisture.\n- The water tank is 40 percent full; it holds 500 liters.\n- Tomatoes get fertilizer every seven days; the last was nine days ago.\n- Keep the door closed while the fan runs, and open it only to harvest.\nIf asked to water, name the bed and the minutes. If you do not know, say so.<|im_end|>\n<|im_start|>user\n";

/// [`SYSTEM`]'s token ids.
pub const SYSTEM_IDS: [u32; 250] = [
    1, 9690, 198, 2683, 359, 12355, 23894, 28, 260, 11173, 2972, 253, 7499, 14869, 30, 19842, 281,
    582, 355, 827, 1890, 8545, 28, 1015, 805, 623, 5307, 30, 198, 29, 17192, 330, 8759, 13886, 30,
    4781, 2763, 7542, 314, 216, 33, 40, 1870, 43, 13886, 737, 216, 35, 32, 288, 216, 36, 32, 1870,
    30, 198, 29, 17192, 389, 8759, 23907, 30, 4781, 2763, 7542, 314, 216, 35, 37, 1870, 28, 527,
    314, 4979, 30, 198, 29, 17192, 340, 8759, 24571, 30, 4781, 2763, 7542, 314, 216, 34, 38, 1870,
    43, 24571, 1923, 216, 34, 37, 288, 216, 35, 37, 1870, 30, 198, 29, 378, 1512, 314, 216, 35, 33,
    5027, 20590, 30, 378, 7344, 28555, 1440, 418, 216, 34, 40, 5027, 284, 260, 10136, 6497, 335,
    418, 216, 35, 34, 5027, 30, 198, 29, 422, 6696, 11034, 7313, 418, 216, 38, 42, 32, 32, 284,
    216, 33, 40, 42, 32, 32, 28, 3772, 3487, 567, 4463, 30, 1963, 2814, 8427, 7845, 563, 582, 1870,
    282, 7542, 30, 198, 29, 378, 913, 7837, 314, 216, 36, 32, 1870, 2073, 43, 357, 6650, 216, 37,
    32, 32, 30380, 30, 198, 29, 8581, 10674, 820, 12480, 897, 4962, 2009, 43, 260, 1596, 436, 7462,
    2009, 3156, 30, 198, 29, 5545, 260, 6644, 6370, 979, 260, 10136, 7313, 28, 284, 1440, 357, 805,
    288, 9989, 30, 198, 1937, 3413, 288, 913, 28, 1462, 260, 4463, 284, 260, 3487, 30, 1094, 346,
    536, 441, 699, 28, 1643, 588, 30, 2, 198, 1, 4093, 198,
];

/// The demo's turns: text, token ids, tokens to generate at most, whether it starts a new
/// conversation (which reuses the system prompt's pages). The first continues the restored
/// prefix; a continuing turn first closes the previous answer (`<|im_end|>\n`).
pub const TURNS: [(&str, &[u32], u32, bool); 3] = [
    (
        "Is bed A dry?<|im_end|>\n<|im_start|>assistant\n",
        &[4182, 4463, 330, 3498, 47, 2, 198, 1, 520, 9531, 198],
        20,
        false,
    ),
    (
        "<|im_end|>\n<|im_start|>user\nHow long should I water it?<|im_end|>\n<|im_start|>assistant\n",
        &[
            2, 198, 1, 4093, 198, 2020, 986, 868, 339, 913, 357, 47, 2, 198, 1, 520, 9531, 198,
        ],
        20,
        false,
    ),
    (
        "When does the fan turn on?<|im_end|>\n<|im_start|>assistant\n",
        &[
            2427, 1072, 260, 10136, 1607, 335, 47, 2, 198, 1, 520, 9531, 198,
        ],
        20,
        true,
    ),
];

/// The end-of-message id (`<|im_end|>`): ends an answer.
pub const STOP: [u32; 1] = [2];
