# layers/: the layers, their per-op dispatch (ops/) and backends (cpu/, cuda/), the loss and
# metrics; layers/model/: the model layer above them (the graph engine, Sequential, the fit loop,
# progress bar, schedules, checkpoints and the layer registry).
ember_folder(layers
  PUBLIC_HEADERS layers.h activation.h activations.h attention.h augment_math.h augmentation.h avgpool2d.h batch_normalization.h conv2d.h dense.h
                 dropout.h embedding.h flatten.h geometry.h gradient_check.h layer.h layer_config.h layer_normalization.h loss.h losses_kinds.h matmul.h maxpool2d.h merge.h metrics.h random_bits.h relu.h
                 model/checkpoint.h model/fit_options.h model/zoo.h model/graph.h model/learning_rate.h model/model.h model/registry.h model/sequential.h model/training_state.h
  SOURCES activation.cpp model/accumulation.cpp activations.cpp attention.cpp augmentation.cpp avgpool2d.cpp batch_normalization.cpp conv2d.cpp cuda_ops.cpp
          dense.cpp dropout.cpp embedding.cpp flatten.cpp geometry.cpp gradient_check.cpp layer.cpp layer_config.cpp layer_normalization.cpp loss.cpp matmul.cpp maxpool2d.cpp merge.cpp
          metrics.cpp
          relu.cpp model/architecture.cpp model/build.cpp model/checkpoint.cpp model/compiled.cpp model/conv_pool_block.cpp model/execute.cpp model/fit.cpp model/fit_loop.cpp model/graph.cpp model/graphed_step.cpp model/params.cpp model/learning_rate.cpp model/micro_batch.cpp model/model.cpp
          model/nested.cpp model/plan.cpp model/progress.cpp model/registry.cpp model/summary.cpp model/topology.cpp model/zoo.cpp
          ops/attention.cpp ops/augment.cpp ops/avgpool2d.cpp ops/batchnorm.cpp ops/conv2d.cpp ops/dense.cpp ops/dropout.cpp ops/elementwise.cpp ops/embedding.cpp ops/layernorm.cpp ops/maxpool2d.cpp
          ops/pointwise.cpp ops/relu.cpp ops/softmax.cpp ops/softmax_xent.cpp ops/losses.cpp
          cpu/attention.cpp cpu/augment.cpp cpu/avgpool2d.cpp cpu/batchnorm.cpp cpu/conv2d.cpp cpu/conv2d_direct.cpp cpu/conv2d_maxpool.cpp cpu/conv2d_winograd.cpp cpu/conv2d_winograd_data.cpp cpu/dense.cpp cpu/dense_bf16.cpp cpu/bf16.cpp cpu/conv2d_bf16.cpp cpu/conv2d_maxpool_bf16.cpp cpu/matmul_bf16.cpp cpu/dropout.cpp cpu/elementwise.cpp cpu/embedding.cpp cpu/layernorm.cpp cpu/maxpool2d.cpp
          cpu/pointwise.cpp cpu/relu.cpp cpu/softmax.cpp cpu/softmax_xent.cpp cpu/losses.cpp
  CUDA_SOURCES cuda/attention.cu cuda/augment.cu cuda/avgpool2d.cu cuda/batchnorm.cpp cuda/bf16.cu cuda/conv2d.cpp cuda/dense.cpp cuda/dense_kernels.cu cuda/dropout.cu cuda/elementwise.cu cuda/embedding.cu cuda/layernorm.cu
               cuda/maxpool2d.cu cuda/ops_table.cpp cuda/pad.cu cuda/pointwise.cu cuda/relu.cu cuda/softmax.cu
               cuda/softmax_xent.cu cuda/losses.cu)
