/**
 * Job payloads as older builds stored them, for the tests that show they are still read: the RL config that builds
 * before payload versions wrote (camelCase, no `version`) for `experimental_config: { learning_rate: 0.01,
 * packed_sequence_length: 32 }`, their parser's whole output.
 */
export const VERSION_0_RL_CONFIG = {
  learningRate: 0.01,
  numTrajectoriesLearningRateMultiplierPower: 0,
  scaleLearningRateByRewardStdDev: false,
  advantageBalance: 0,
  scaleRewards: true,
  ppo: false,
  epsilon: 1,
  epsilonHigh: 4,
  importanceSamplingLevel: 'token',
  maskProbRatio: false,
  maxNegativeAdvantageImportanceSamplingWeight: null,
  k2Tau: null,
  precalculateLogprobs: false,
  allowTrainingWithoutLogprobs: false,
  truncatedImportanceSampling: null,
  packedSequenceLength: 32,
  logprobCalculationChunkSize: 1024,
  klPenaltyCoef: 0,
  klPenaltySource: 'current_learner',
  klPenaltyReferenceStep: null,
  klPenaltyStepLag: null,
  klRefAdapterPath: null,
  klReference: null,
  chatTemplateKwargs: null,
};
