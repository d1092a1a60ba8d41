import { realTarget } from '../helpers/kube-target.ts';
import { proofScenarios } from './proof-scenarios.ts';

proofScenarios('real kube-apiserver', realTarget);
