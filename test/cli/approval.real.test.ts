import { realTarget } from '../helpers/kube-target.ts';
import { approvalScenarios } from './approval-scenarios.ts';

approvalScenarios('real kube-apiserver', realTarget);
