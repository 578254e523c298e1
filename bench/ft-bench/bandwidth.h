// The memory ceiling every "% peak" of ft-bench is taken against: the device's own copy
// bandwidth, measured, not a datasheet's or another GPU's figure (an H100 copies at about
// 3.0 TB/s, an H200 at about 4.3).
#pragma once

namespace ft::bench {

/// Bytes a second of a device-to-device copy of 1 GiB by a plain vectorized copy kernel, its
/// read and its write both counted: the median of CUDA-event-timed graph replays after a
/// warm-up. Measured on the first call in the process and kept.
double copy_bandwidth();

/// bytes_per_s as a percentage of copy_bandwidth().
double percent_of_copy(double bytes_per_s);

}  // namespace ft::bench
