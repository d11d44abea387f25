#!/usr/bin/env bash
# Plots the CSVs in bench/results (written by bench/run_cpu.sh) to PNGs next to them (gnuplot).
set -euo pipefail
cd "$(dirname "$0")/results"
command -v gnuplot >/dev/null || { echo "plot: gnuplot missing (apt-get install gnuplot-nox)" >&2; exit 1; }

if [[ -f matmul_cpu.csv ]]; then
gnuplot <<'GP'
set terminal pngcairo size 900,560 font ",11" noenhanced
set output "matmul_cpu.png"
set datafile separator ","
set key autotitle columnhead top left
set logscale xy
set xlabel "matrix size n (n x n times n x n)"
set ylabel "time per matmul, ms (median)"
set grid
set title "Square matmul: naive loop vs oneDNN sgemm (2 threads)"
plot "matmul_cpu.csv" using 1:($2 > 0 ? $2 : 1/0) with linespoints lw 2 title "naive triple loop", \
     "" using 1:3 with linespoints lw 2 title "oneDNN sgemm (Ember matmul)"
GP
fi

if [[ -f train_cpu.csv ]]; then
gnuplot <<'GP'
set terminal pngcairo size 900,560 font ",11" noenhanced
set output "train_cpu.png"
set datafile separator ","
set logscale x 2
set xlabel "batch size"
set ylabel "images per second (median step)"
set grid
set key top left
set title "Reference CNN training throughput, Ember CPU (2 threads)"
plot "< grep ',step,' train_cpu.csv" using 3:7 with linespoints lw 2 title "data excluded", \
     "< grep ',data,' train_cpu.csv" using 3:7 with linespoints lw 2 title "data included"
GP
fi

if [[ -f conv_cpu.csv ]]; then
gnuplot <<'GP'
set terminal pngcairo size 900,560 font ",11" noenhanced
set output "conv_cpu.png"
set datafile separator ","
set xlabel "images N (128x128x3)"
set ylabel "forward + backward + Adam, ms (median)"
set grid
set key top left
set title "Conv2D 32 filters 8x8, Ember CPU (2 threads)"
plot "conv_cpu.csv" using 2:3 skip 1 with linespoints lw 2 title "Ember CPU"
GP
fi

if [[ -f compare_cpu.csv ]]; then
gnuplot <<'GP'
set terminal pngcairo size 900,560 font ",11" noenhanced
set output "compare_cpu.png"
set datafile separator ","
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set ylabel "ms per training step (median over rounds)"
set grid ytics
set yrange [0:*]
set title "Reference CNN, batch 64, 2 threads: Ember vs PyTorch 1.13 (same run)"
plot "< grep ',step,' compare_cpu.csv" using 4:xtic(1) title "data excluded", \
     "< grep ',data,' compare_cpu.csv" using 4 title "data included"
GP
fi
ls -1 *.png
