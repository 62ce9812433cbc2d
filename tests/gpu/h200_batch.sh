#!/bin/bash
# One H200 session's measurements in one go, in the order they matter, each one's record and log written into
# $RES as it finishes (default /tmp/res; $RES/DONE when all are done). Start it detached on the device machine,
# from the repository root, with .whl and .deb carried (tests/gpu/device_setup.sh's header):
#
#   setsid nohup bash tests/gpu/h200_batch.sh > /tmp/batch.log 2>&1 &
#
# then copy $RES back between calls. Steps (about 25 minutes on one H200 in all):
#   1. each chapter's measurements (tests/gpu/measure.py): 07 and 09, whose targets are set on the model answers;
#   2. chapter 09's class: 20 honest copies and its whole corpus, 10 at once (gpu_class_throughput.py 09);
#   3. every chapter's model answer graded twice, with the corpus cases of 05-09 named below;
#   4. nbval of the solution notebooks of 07 and 09 on the GPU;
#   5. chapters 10 and 11 measured beside their peers (autograd, torch.compile, Liger-Kernel, SDPA's backward);
#   6. nbval of the solution notebooks of 02, 03, 10 and 11 on the GPU (the cells added for issues 45 and 47);
#   7. chapter 11's backward launches swept (lab/sweeps/attention_backward_launches.py), to choose backward_config's;
#   8. chapter 03's class: 24 honest copies and its whole corpus, 8 at once (gpu_class_throughput.py 03);
#   9. the GPU memory hog of 09's corpus graded beside two honest copies, 3 at once (the memory share on a GPU);
#   r. the helpers and chapters copied again from the checkout the batch was started in, where a later call of the
#      device tool has brought changes (a launch chosen from step 7's record, before step 5 measures it).
RES=${RES:-/tmp/res}
STEPS=${STEPS:-1 2 3 4}
mkdir -p "$RES"
# Run from a snapshot: a later call of the device tool copies the working tree again, over files in use.
LIVE=$PWD SNAP=/tmp/snap; rm -rf "$SNAP"; cp -r . "$SNAP"; cd "$SNAP" || exit 1
. tests/gpu/device_setup.sh > "$RES/setup.log" 2>&1 || { echo "setup failed" > "$RES/DONE"; exit 1; }
for step in $STEPS; do
  echo "step $step: $(date -u +%FT%TZ)" >> "$RES/steps.log"
  case $step in
    1) python3 tests/gpu/measure.py 07_matmul_relu --out "$RES" > "$RES/measure_07.log" 2>&1
       python3 tests/gpu/measure.py 09_attention --out "$RES" > "$RES/measure_09.log" 2>&1 ;;
    2) python3 tests/gpu/gpu_class_throughput.py 09 --workers 10 --name 09_class --out "$RES" > "$RES/class_09.log" 2>&1 ;;
    3) python3 tests/gpu/gpu_class_throughput.py course --students 2 --workers 9 --name course_twice \
         --corpus kim_online_sum_not_rescaled,lou_sum_of_squares_of_last_block,jon_row_loop_stops_after_first_block,pat_calls_the_fast_path \
         --out "$RES" > "$RES/course_twice.log" 2>&1 ;;
    4) python3 tests/gpu/gpu_nbval.py 07_matmul_relu 09_attention --out "$RES/gpu_nbval_07_09.json" > "$RES/nbval.log" 2>&1 ;;
    5) python3 tests/gpu/measure.py 10_rowwise_backward --out "$RES" > "$RES/measure_10.log" 2>&1
       python3 tests/gpu/measure.py 11_attention_backward --out "$RES" > "$RES/measure_11.log" 2>&1 ;;
    6) python3 tests/gpu/gpu_nbval.py 02_benchmarking 03_vector_add 10_rowwise_backward 11_attention_backward \
         --out "$RES/gpu_nbval_02_03_10_11.json" > "$RES/nbval_02_03_10_11.log" 2>&1 ;;
    7) python3 lab/sweeps/attention_backward_launches.py --out "$RES/11_attention_backward_launches.json" \
         > "$RES/sweep_11.log" 2>&1 ;;
    8) python3 tests/gpu/gpu_class_throughput.py 03 --workers 8 --name 03_class --out "$RES" > "$RES/class_03.log" 2>&1 ;;
    9) python3 tests/gpu/gpu_class_throughput.py 09 --copies 2 --corpus max_holds_the_gpu_memory --workers 3 \
         --name 09_memory_hog --out "$RES" > "$RES/class_09_hog.log" 2>&1 ;;
    r) for d in utils solutions; do cp -r "$LIVE/$d/." "$SNAP/$d/"; done
       cp -r utils/. /opt/course-site/triton_course/ ;;
  esac
  echo "step $step done: $(date -u +%FT%TZ)" >> "$RES/steps.log"
done
echo done > "$RES/DONE"
